"""``python -m native.runner``: the native runner speaking JSON lines.

Commands come one per line on stdin (or from ``--commands FILE``); events go one per line
to stdout (or ``--out FILE``, flushed per line so a host can pull partial output). The
file mode lets a host run the runner on a phone with push/shell/pull only. See
docs/runner-protocol.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import IO, TYPE_CHECKING, Any

from as2d_cli import __version__
from as2d_cli.errors import As2dError, DeviceError
from native import limit_blas_threads
from native.producer import host_cpus
from native.protocol import (
    CORPUS_ENV,
    PROTOCOL,
    PROTOCOL_VERSION,
    ProtocolError,
    decode_settings,
    event,
    parse_command,
)

if TYPE_CHECKING:  # loaded on demand: the runner answers `hello` before any model import
    from as2d_cli.corpus.manifest import Corpus
    from as2d_cli.models.prompting import PromptSpec
    from native.request import Models


class Runner:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.models: Models | None = None
        self.target_cores: list[int] | None = None
        self.producer_cores: list[int] | None = None
        self._corpus: Corpus | None = None

    def emit(self, name: str, /, **fields: Any) -> None:
        self.out.write(event(name, **fields) + "\n")
        self.out.flush()

    # ------------------------------------------------------------------ ops
    def op_hello(self, cmd: dict) -> None:
        self.emit(
            "hello",
            protocol=PROTOCOL,
            version=PROTOCOL_VERSION,
            runner="as2d-python",
            toolkit=__version__,
            pid=os.getpid(),
            cpus=os.cpu_count(),
            affinity=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            blas_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
        )

    def op_load(self, cmd: dict) -> None:
        from native.request import load_models

        threads = cmd.get("threads", 1)
        if not isinstance(threads, int) or threads < 1:
            raise ProtocolError("field 'threads' must be an integer >= 1")
        self.target_cores = _cores(cmd.get("target_cores"), "target_cores")
        self.producer_cores = _cores(cmd.get("producer_cores"), "producer_cores")
        pinning = _try_pinning({"verifier": self.target_cores, "producer": self.producer_cores})
        if pinning["failed"]:
            raise DeviceError(
                f"pinning failed on this device ({pinning['failed']}); rerun with --os-placement to "
                "measure under the OS's own placement (recorded), or choose other cores with "
                "--verifier-cores / --producer-cores"
            )
        self.models = load_models(cmd.get("models"), threads=threads, prompt=_prompt(cmd))
        b = self.models.pair
        self.emit(
            "loaded",
            load_ms=self.models.load_ms,
            models=sorted(b.manifest["models"]),
            vocab=b.vocab.size,
            eos=b.vocab.eot,
            max_tokens=self.models.target.max_length,
            pair=b.name,
            model_type=b.model_type(),
            task=b.task,
            language=b.language,
            prompt=b.prompt.to_wire(),
            pinning=pinning,
        )

    def _audio(self, s: dict) -> tuple[Any, str, str | None]:
        """A request's audio, its language and its own question (a corpus window's)."""
        if s.get("window") is not None:
            if self._corpus is None:
                from as2d_cli.corpus.manifest import load_corpus

                self._corpus = load_corpus(os.environ.get(CORPUS_ENV) or None)
            w = self._corpus.get(str(s["window"]))
            return w.load_audio(), w.language, w.question

        raise ProtocolError(
            "decoding an audio file path is not supported yet; pass a corpus 'window' id"
        )

    def op_decode(self, cmd: dict) -> None:
        from native.request import run_request

        s = decode_settings(cmd)
        if self.models is None:
            raise ProtocolError("send a 'load' command before 'decode'")
        audio, language, question = self._audio(s)
        res = run_request(
            self.models,
            audio,
            s,
            language=language,
            question=question,
            target_cores=self.target_cores,
            producer_cores=self.producer_cores,
        )
        self.emit("result", **res)

    def op_stream(self, cmd: dict) -> None:
        """A paced stream through the resident models (docs/streaming.md): a ``stream_start``
        event, one ``block`` event per block as its output completes, ``check`` events with
        --check, then ``streamed``."""
        from native.stream_loop import check_blocks, run_stream
        from native.stream_recording import stream_audio
        from native.stream_settings import stream_settings

        if self.models is None:
            raise ProtocolError("send a 'load' command before 'stream'")
        s = stream_settings(cmd)
        audio, language = stream_audio(cmd, self._corpus_dir())
        run = run_stream(
            self.models,
            audio,
            s,
            language=language,
            target_cores=self.target_cores,
            producer_cores=self.producer_cores,
            on_block=lambda rec: self.emit("block", **rec),
            on_start=lambda info: self.emit("stream_start", **info),
        )
        if s.check:
            for c in check_blocks(self.models, audio, s, run.blocks, language=language):
                self.emit("check", **c)
        self.emit(
            "streamed",
            end_s=run.end_s,
            drained_s=run.drained_s,
            warmup_s=run.warmup_s,
            epochs=run.epochs,
            source_mode=run.source_mode,
            source_error=run.source_error,
            settings=s.to_dict(),
        )

    def _corpus_dir(self) -> str | None:
        return os.environ.get(CORPUS_ENV) or None

    def op_calibrate(self, cmd: dict) -> None:
        from native.calibration import run_calibration_op

        if self.models is None:
            raise ProtocolError("send a 'load' command before 'calibrate'")
        audio, language, question = self._audio({"window": cmd.get("window")})
        for sample in run_calibration_op(self, cmd, audio, language, question):
            self.emit("sample", **sample)
        self.emit("calibrated", what=cmd.get("what"))

    # ------------------------------------------------------------------ loop
    def handle(self, line: str) -> bool:
        line = line.strip()
        if not line:
            return True
        try:
            cmd = parse_command(line)
            op = cmd["op"]
            if op == "quit":
                if self.models is not None:
                    self.models.close()  # the producer process
                self.emit("bye")
                return False
            fn = getattr(self, f"op_{op}", None)
            if fn is None:
                raise ProtocolError(
                    f"unknown op {op!r}; the runner knows hello, load, decode, stream, calibrate, quit"
                )
            fn(cmd)
        except As2dError as exc:
            self.emit("error", message=str(exc), error_type=type(exc).__name__)
        except Exception as exc:  # keep the runner alive; the host reports one line
            self.emit(
                "error",
                message=f"{type(exc).__name__}: {exc}",
                error_type="internal",
                trace=traceback.format_exc(limit=6),
            )
        return True


def _try_pinning(sides: dict[str, list[int] | None]) -> dict[str, Any]:
    """Pin this thread to each requested side's cores once and restore it: the placement
    the runs will use, and why it cannot be used ("failed") when the device refuses it."""
    out: dict[str, Any] = {"requested": sides, "failed": None}
    if not hasattr(os, "sched_setaffinity"):
        if any(sides.values()):
            out["failed"] = "this platform has no sched_setaffinity"
        return out
    before = os.sched_getaffinity(0)
    try:
        for side, cores in sides.items():
            if not cores:
                continue
            try:
                os.sched_setaffinity(0, host_cpus(cores))
            except OSError as exc:
                out["failed"] = (
                    f"{side} on CPU{','.join(map(str, cores))}: sched_setaffinity: {exc.strerror}"
                )
                break
    finally:
        os.sched_setaffinity(0, before)
    return out


def _prompt(cmd: dict) -> PromptSpec:
    """The ``load`` command's prompt settings: ``prompt`` (a PromptSpec's wire form, or
    null), else the string fields ``task`` and ``language``."""
    from as2d_cli.models.prompting import PromptSpec

    doc = cmd.get("prompt")
    if doc is None:
        for key in ("task", "language"):
            if cmd.get(key) is not None and not isinstance(cmd.get(key), str):
                raise ProtocolError(f"field {key!r} must be a string")
        return PromptSpec(cmd.get("task"), cmd.get("language"))
    if not isinstance(doc, dict):
        raise ProtocolError(
            "field 'prompt' must be an object with task, language, question, text, or null"
        )
    unknown = sorted(set(doc) - {"task", "language", "question", "text"})
    if unknown:
        raise ProtocolError(
            f"field 'prompt' has unknown keys {', '.join(unknown)}; it takes task, language, "
            "question, text"
        )
    for key, v in doc.items():
        if v is not None and not isinstance(v, str):
            raise ProtocolError(f"field 'prompt.{key}' must be a string or null, got {v!r}")
    for key in ("task", "language"):
        if cmd.get(key) is not None:
            raise ProtocolError(
                f"field {key!r} and field 'prompt' both set the prompt; put {key} in 'prompt'"
            )
    return PromptSpec.from_wire(doc)


def _cores(v: Any, key: str) -> list[int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(c, int) and c >= 0 for c in v):
        raise ProtocolError(f"field {key!r} must be a list of CPU numbers")
    return v


def main(argv: list[str] | None = None) -> int:
    limit_blas_threads()  # before the models' numpy is first imported
    ap = argparse.ArgumentParser(prog="python -m native.runner")
    ap.add_argument("--commands", help="read commands from this JSON Lines file instead of stdin")
    ap.add_argument("--out", help="write events to this file instead of stdout")
    a = ap.parse_args(argv)
    out = open(a.out, "w", encoding="utf-8") if a.out else sys.stdout
    src = open(a.commands, encoding="utf-8") if a.commands else sys.stdin
    runner = Runner(out)
    try:
        for line in src:
            if not runner.handle(line):
                break
    finally:
        if a.out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
