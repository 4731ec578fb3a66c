"""Trace generation: the target's greedy reference, each source's own output, and the
prefix-conditioned drafter's continuation at every target-path position, per window.

Windows fan out on an executor (:mod:`as2d_cli.execution`; each worker with
single-threaded ONNX Runtime sessions): a local process pool, or Ray, where the pair's
files travel once through the object store. Finished windows are appended to
``<out>.partial.jsonl`` in window order, each record whole on its own line and fsynced
before the next window is taken as done, so an interrupted build — Ctrl-C, a killed
process, a power cut — resumes where it stopped and traces no finished window again (a
line a kill tore is cut off and its window traced again). The final file is written only
when every window is done, atomically (:func:`as2d_cli.formats.trace_io.write_traces`),
so it is either whole or absent; the partial goes after it. One build at a time writes a
partial (an exclusive lock on it).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from as2d_cli import __version__
from as2d_cli.engine.methods import DEFAULT_ASP_CAP
from as2d_cli.errors import Interrupted, UserError
from as2d_cli.execution import Executor, LocalPool
from as2d_cli.formats.trace import SCHEMA as TRACE_SCHEMA
from as2d_cli.formats.trace import VERSION as TRACE_VERSION
from as2d_cli.models.model_pair import ModelPair, load_pair
from as2d_cli.models.prompting import TRACE_TASKS, PromptSpec

DRAFTER_CAP = DEFAULT_ASP_CAP  # ASP's largest cap: SD and ASP never ask for more
SOURCE_SLACK = 8  # a source may run a little past the target's cap

_LOADED: tuple[tuple[str, PromptSpec], Any] | None = None  # this process's pair, and its key


def _models(job: _TraceJob) -> Any:
    """The job's pair opened once per process (asking for another frees the previous one):
    the job's own loaded pair, or on a worker that may not share this host's disk, the copy
    of its files the job carries (checked against their hashes as it loads)."""
    global _LOADED
    key = (str(job.pair.directory), job.pair.prompt)
    if _LOADED is None or _LOADED[0] != key:
        from native.request import open_models

        pair = job.pair
        if job.files is not None:
            pair = load_pair(_unpacked(job.files, job.digest), prompt=pair.prompt)
        if _LOADED is not None:
            _LOADED[1].close()
        _LOADED = (key, open_models(pair, threads=1))
    return _LOADED[1]


def autoregressive_sources(pair: ModelPair) -> tuple[str, ...]:
    """The pair's autoregressive sources: the drafter, and ``lookahead`` when its drafter
    has a look-ahead decoder (models.json ``files.ahead_decoder``)."""
    return ("drafter", "lookahead") if pair.has_ahead() else ("drafter",)


def trace_window(
    window: Any, models: Any, cap: int = DRAFTER_CAP, max_tokens: int | None = None
) -> dict:
    """One window's trace record (the ``as2d.trace`` window record as a dict)."""
    from as2d_cli.models.target import greedy_decode

    audio = window.load_audio()
    target = models.target
    max_tokens = min(max_tokens or target.max_length, target.max_length)
    question = window.question  # asked only by an audio LLM with --task answer, no --question
    ref = [int(t) for t in greedy_decode(target, audio, max_tokens, window.language, question)]
    eos = ref[-1] == target.eos_id
    # The drafter running on its own history (As²d's autoregressive source), and the same
    # drafter checking its look-ahead guesses when the pair has that decoder.
    sources: dict[str, Any] = {}
    for name in autoregressive_sources(models.pair):
        src = models.source(name, audio, max_tokens + SOURCE_SLACK, window.language, question)
        src.start()
        toks: list[int] = []
        confs: list[float] = []
        steps: list[int] = []
        while (unit := src.step()) is not None:
            steps.append(len(unit))
            for t, c in unit:
                toks.append(int(t))
                confs.append(round(float(c), 6))
        sources[name] = {
            "tokens": toks,
            "confidences": confs,
            "eos": bool(toks) and toks[-1] == target.eos_id,
            "eligible": True,
        }
        if name != "drafter":
            sources[name]["steps"] = steps
    # The chunked CTC recognizer (English only; others fall back, D.4.3).
    if models.ctc_eligible(window.language):
        ctc = models.source("ctc", audio, max_tokens + SOURCE_SLACK)
        ctc.start()
        chunks = []
        i = 0
        while (unit := ctc.step()) is not None:
            i += 1
            chunks.append(
                {
                    "tokens": [int(t) for t, _ in unit],
                    "audio_end_s": round(min(2.56 * i, window.seconds), 3),
                }
            )
        sources["ctc"] = {"chunks": chunks, "eos": True, "eligible": True}
    else:
        sources["ctc"] = {"chunks": [], "eos": True, "eligible": False}
    # The prefix-conditioned drafter from every target-path position (SD and ASP).
    if models.pair.converts("drafter"):  # through the text conversion, one draft a position
        conts, dconfs = converted_continuations(
            models.drafter, audio, ref, cap, target.eos_id, window.language, question
        )
    else:
        conts, dconfs = drafter_continuations(
            models.drafter.model, audio, ref, cap, target.eos_id, window.language, question
        )
    return {
        "id": window.id,
        "dataset": window.setting,
        "split": window.split,
        "audio_seconds": window.seconds,
        "task": TRACE_TASKS[models.pair.task or models.pair.default_task()],
        "language": window.language,
        "reference": ref,
        "eos": eos,
        "capped": not eos,
        "max_tokens": max_tokens,
        "sources": sources,
        "drafter": {"cap": cap, "continuations": conts, "confidences": dconfs},
    }


def converted_continuations(
    drafter: Any,
    audio: Any,
    ref: list[int],
    cap: int,
    eos_id: int,
    language: str | None = None,
    question: str | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """The cross-vocabulary drafter's ``cap``-token continuation (in the target's tokens)
    after every reference prefix: one converted draft per position."""
    drafter.start(audio, None, language, question)
    conts: list[list[int]] = []
    confs: list[list[float]] = []
    for n in range(len(ref)):
        d = drafter.draft(ref[: n + 1], cap)
        toks = list(d.tokens[:cap])
        cs = [round(float(c), 6) for c in (d.confidences or [0.0] * len(toks))][: len(toks)]
        pad = cap - len(toks)
        conts.append(toks + [eos_id] * pad)
        confs.append(cs + [0.0] * pad)
    return conts, confs


def drafter_continuations(
    model: Any,
    audio: Any,
    ref: list[int],
    cap: int,
    eos_id: int,
    language: str | None = None,
    question: str | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """The drafter's greedy ``cap``-token continuation after every reference prefix.

    Greedy decoding is deterministic, so when the continuation after ``ref[:n+1]`` starts
    with ``ref[n+1]``, the one after ``ref[:n+2]`` is the same tokens shifted by one plus
    one new token: a single decoder call instead of ``cap``. Only where the drafter
    disagrees with the target is the cache rolled back and ``cap`` tokens generated."""
    from as2d_cli.models.session import softmax_max, truncate_cache

    cross = model.encode(audio, language, question)
    limit = model.max_positions
    base = list(cross.prompt)
    conts: list[list[int]] = []
    confs: list[list[float]] = []
    cache = model.empty_cache()
    seq: list[int] = []  # tokens in the cache
    cur: list[int] = []
    cur_c: list[float] = []

    def feed(tokens: list[int]) -> tuple[int, float]:
        nonlocal cache, seq
        logits = None
        first = 16 if seq else max(16, len(base))  # from an empty cache: the prompt at once
        for i in [0, *range(first, len(tokens), 16)]:
            logits, cache = model.decode(tokens[i : (first if i == 0 else i + 16)], cache, cross)
        if logits is None:  # every caller feeds at least one token
            raise ValueError("feed() needs at least one token")
        seq = seq + tokens
        last = logits[-1]
        return int(last.argmax()), round(float(softmax_max(last[None])[0]), 6)

    for n in range(len(ref)):
        prefix = base + ref[: n + 1]
        want = min(cap, max(0, limit - len(prefix)))
        if want == cap and len(cur) == cap and n > 0 and cur[0] == ref[n]:
            # Invariant: the cache holds the previous prefix + cur[:-1] = prefix + cur[1:-1].
            cur, cur_c = cur[1:], cur_c[1:]
            t, c = feed([cur[-1]])
            cur.append(t)
            cur_c.append(c)
        else:
            common = 0
            for a, b in zip(seq, prefix):
                if a != b:
                    break
                common += 1
            common = min(common, len(prefix) - 1)  # at least one token to feed
            cache = truncate_cache(cache, common)
            seq = seq[:common]
            cur, cur_c = [], []
            if want > 0:
                t, c = feed(prefix[common:])
                cur, cur_c = [t], [c]
                while len(cur) < want:
                    t, c = feed([cur[-1]])
                    cur.append(t)
                    cur_c.append(c)
        pad = cap - len(cur)  # the decoder's position limit can end a continuation early
        conts.append(cur + [eos_id] * pad)
        confs.append(cur_c + [0.0] * pad)
    return conts, confs


# Folders and files of a pair folder that are not the pair (trace outputs, training logs).
_NOT_SHIPPED = {"traces", "training_logs"}


@dataclass(frozen=True)
class _TraceJob:
    """What every window task reads: the loaded model ``pair`` (its files checked once, by
    the host). ``files`` (relative path → bytes) carries the pair to workers that may not
    share this host's disk (Ray); ``digest`` is the pair's identity."""

    pair: ModelPair
    max_tokens: int | None
    digest: str
    files: dict[str, bytes] | None = None


def pair_files(directory: Path) -> dict[str, bytes]:
    """Every file of a pair folder (relative path → bytes), without trace outputs and logs."""
    out: dict[str, bytes] = {}
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if path.is_file() and rel.parts[0] not in _NOT_SHIPPED:
            out[rel.as_posix()] = path.read_bytes()
    return out


def _unpacked(files: dict[str, bytes], digest: str) -> str:
    """The shipped pair as a folder on this worker's host, written once per host (workers
    race to rename their copy into place; the loser drops its copy). ``load_pair``
    checks every file's SHA-256 against the manifest when it loads them."""
    root = Path(tempfile.gettempdir()) / f"as2d-pair-{digest[:16]}"
    if (root / ".complete").exists():
        return str(root)
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
    for rel, data in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
    (tmp / ".complete").touch()
    try:
        tmp.rename(root)
    except OSError:  # another worker of this host was first
        shutil.rmtree(tmp, ignore_errors=True)
    return str(root)


def _trace_task(job: _TraceJob, wid: str) -> tuple[str, dict | str]:
    try:
        from as2d_cli.corpus.manifest import load_corpus

        models = _models(job)
        w = load_corpus().get(wid)
        return wid, trace_window(w, models, max_tokens=job.max_tokens)
    except Exception as exc:  # reported per window by the parent
        return wid, f"{type(exc).__name__}: {exc}"


def provenance(b: ModelPair) -> dict:
    """Who made a trace file: the pair (its identity, each model's files), the toolkit."""
    from as2d_cli.formats.common import git_commit

    return {
        "pair": b.identity(),
        # Each model named by its kind and the SHA-256 of its files (from models.json).
        "models": {
            name: f"{info.get('kind')} "
            + ",".join(
                f"{k.rsplit('/', 1)[-1]}:{v[:16]}"
                for k, v in sorted(info.get("sha256", {}).items())
            )
            for name, info in b.manifest["models"].items()
        },
        "tokenizer": {"name": str(b.manifest["tokenizer"]), "vocab_size": b.vocab.size},
        "toolkit_version": __version__,
        "git_commit": git_commit(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "generator": "as2d traces build",
    }


def partial_path(out: Path) -> Path:
    """Where a build of ``out`` keeps its finished windows until the file is written."""
    return out.with_name(out.name + ".partial.jsonl")


def check_out(out: Path, force: bool) -> None:
    """Refuse an existing output (before any worker or cluster starts)."""
    if out.exists() and not force:
        extra = ""
        if partial_path(out).exists():
            extra = (
                f" ({partial_path(out).name} beside it holds the windows of an unfinished "
                "build of that file: --force finishes that build and replaces the file)"
            )
        raise UserError(
            f"{out} already exists and is never overwritten; pass --force or another --out{extra}"
        )


def _lock(f: Any, partial: Path) -> None:
    """One build at a time appends to a partial: a second one is refused."""
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(
            f"another `as2d traces build` is writing {partial}; wait for it to finish, or "
            "build into another --out"
        ) from None


def _append(f: Any, rec: dict) -> None:
    """One record, whole on its own line, on disk before the window counts as done."""
    f.write((json.dumps(rec, separators=(",", ":")) + "\n").encode("utf-8"))
    f.flush()
    os.fsync(f.fileno())


def _resume(f: Any, partial: Path, head: dict) -> tuple[dict[str, dict], bool]:
    """The finished windows of the partial open in ``f`` (id → record) and whether it
    has its first line (``head``: who made it, and with which settings). A last line a
    kill tore (no newline) is cut off first, so the next record starts a line of its own
    and that window is traced again; a partial of another pair or other settings is
    refused. A window recorded twice keeps its last record."""
    data = partial.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        os.ftruncate(f.fileno(), end)
        os.fsync(f.fileno())
        data = data[:end]
    done: dict[str, dict] = {}
    has_head = False
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # damaged in the middle (not something a kill leaves): traced again
        if not isinstance(rec, dict):
            continue
        if "pair" in rec and "id" not in rec:  # the partial's first line: who made it
            ident = head["pair"]
            if rec["pair"] != ident:
                raise UserError(
                    f"{partial} holds windows traced with pair {rec['pair'].get('name')!r} "
                    f"({rec['pair'].get('task')}), not {ident['name']!r} ({ident['task']}); "
                    "move it away or build with the same --models/--task/--language/--question"
                )
            if "max_tokens" in rec and rec["max_tokens"] != head["max_tokens"]:

                def said(n: object) -> str:
                    return "no --max-tokens" if n is None else f"--max-tokens {n}"

                raise UserError(
                    f"{partial} holds windows traced with {said(rec['max_tokens'])}, not "
                    f"{said(head['max_tokens'])}; build with the same option to resume it, or "
                    "move it away"
                )
            has_head = True
            continue
        if isinstance(rec.get("id"), str):
            done[rec["id"]] = rec
    if done and not has_head:
        raise UserError(
            f"{partial} has no first line naming the pair that traced its windows; move it "
            "away (its windows are traced again)"
        )
    return done, has_head


@dataclass(frozen=True)
class _Request:
    """What ``build_traces`` was asked (its arguments, the windows resolved)."""

    split: str
    out: Path
    processes: int | None
    progress: Callable[[int, int, str], None] | None
    force: bool
    max_tokens: int | None
    executor: Executor | None


@dataclass
class _Partial:
    """The partial trace file being built: its open file and path, the windows it has
    finished (id → record), whether it has its first line, that line (who made it, with
    which settings) and the pair."""

    f: Any
    path: Path
    done: dict[str, dict]
    has_head: bool
    head: dict
    pair: ModelPair


def build_traces(
    split: str,
    out: Path,
    *,
    pair: ModelPair | None = None,
    processes: int | None = None,
    limit: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    force: bool = False,
    max_tokens: int | None = None,
    executor: Executor | None = None,
) -> Path:
    """Trace ``split``'s requests of the pair's task into ``out`` with the model ``pair``
    (loaded once, with its prompt settings; None: the bundled pair) on ``executor`` (default:
    a local pool of ``processes``, one per usable CPU, but no more than the windows left).
    The task's requests are ``Corpus.requests``: the ASR windows (transcribe), the
    translation windows (translate) or the spoken-QA requests, each under its own id with
    its own question (answer)."""
    from as2d_cli.corpus.manifest import load_corpus

    check_out(out, force)
    task = "transcribe" if pair is None else str(pair.effective_prompt().task)
    windows = load_corpus().requests(task, split)  # the task's requests: windows or QA ids
    if limit is not None:
        windows = windows[:limit]
    if not windows:
        raise UserError(f"the corpus has no {split!r} requests of task {task!r}")
    if pair is None:
        pair = load_pair()  # its files checked against their hashes
    else:
        pair.verify()  # once, here: the workers open the files as they are
    ident = pair.identity()
    partial = partial_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "ab") as f:
        _lock(f, partial)
        head = {"pair": ident, "max_tokens": max_tokens}
        done, has_head = _resume(f, partial, head)
        try:
            req = _Request(split, out, processes, progress, force, max_tokens, executor)
            return _build(req, windows, _Partial(f, partial, done, has_head, head, pair))
        except Interrupted:
            raise
        except KeyboardInterrupt:
            if not done:  # nothing traced yet: no partial left behind
                partial.unlink(missing_ok=True)
                raise Interrupted(
                    f"as2d traces build interrupted before a window of {out.name} was traced; "
                    "run the same command again"
                ) from None
            kept = sum(1 for w in windows if w.id in done)
            where = f"kept in {partial}" if partial.exists() else "written"
            raise Interrupted(
                f"as2d traces build interrupted; {kept} of {len(windows)} windows {where} — "
                "run the same command again to resume"
            ) from None


def _build(req: _Request, windows: list, partial: _Partial) -> Path:
    """The windows not yet in the partial, then the final file."""
    _trace_missing(req, windows, partial)
    header = _trace_header(partial.pair, req.split, len(windows))
    path = _write_checked(req, header, [partial.done[w.id] for w in windows])
    partial.path.unlink()
    return path


def _trace_missing(req: _Request, windows: list, partial: _Partial) -> None:
    """Trace the windows the partial lacks, each record on disk as it arrives; a window
    that failed leaves the finished ones in the partial for the next run."""
    done, progress = partial.done, req.progress
    todo = [w.id for w in windows if w.id not in done]
    failures: list[str] = []
    if not partial.has_head:
        _append(partial.f, partial.head)
    n = len(windows) - len(todo)
    if progress:
        progress(n, len(windows), "resumed" if done else "starting")
    ex = req.executor if req.executor is not None else LocalPool(req.processes)
    job = _TraceJob(
        partial.pair,
        req.max_tokens,
        partial.head["pair"]["sha256"],
        pair_files(partial.pair.directory) if ex.remote and todo else None,
    )
    # Fresh interpreters (no fork): ONNX Runtime sessions do not survive a fork.
    for wid, rec in ex.map(_trace_task, job, todo, fork=False):
        n += 1
        if isinstance(rec, str):
            failures.append(f"{wid}: {rec}")
        else:
            _append(partial.f, rec)
            done[wid] = rec
        if progress:
            progress(n, len(windows), wid)
    if failures:
        raise UserError(
            f"{len(failures)} window(s) failed (first: {failures[0]}); finished windows are kept in "
            f"{partial.path} and the next run resumes"
        )


def _trace_header(pair: ModelPair, split: str, n_windows: int) -> dict:
    """The trace file's first line: who made it, its sources, split and size."""
    return {
        "schema": TRACE_SCHEMA,
        "version": TRACE_VERSION,
        "provenance": provenance(pair),
        "eos_id": pair.vocab.eot,  # the target's (OrtTarget.eos_id)
        "sources": {
            **{
                name: {"kind": "autoregressive", "model": "drafter"}
                for name in autoregressive_sources(pair)
            },
            "ctc": {"kind": "chunked", "model": "ctc"},
        },
        "default_source": "drafter",
        "split": split,
        "windows": n_windows,
        "vocab_size": pair.vocab.size,
    }


def _write_checked(req: _Request, header: dict, records: list[dict]) -> Path:
    """The trace file written whole or not at all, after it loads as traces."""
    from as2d_cli.formats.trace_io import load_traces, write_traces

    out = req.out
    # Checked before it becomes the result, in a scratch file no reader of trace folders
    # takes for traces (they read *.jsonl and *.jsonl.gz).
    tmp = out.with_name(f".{out.name}.check-{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as t:
            t.write(json.dumps(header, separators=(",", ":")) + "\n")
            for rec in records:
                t.write(json.dumps(rec, separators=(",", ":")) + "\n")
        ts = load_traces(tmp)
    finally:
        tmp.unlink(missing_ok=True)
    return write_traces(out, ts, split=req.split, force=req.force)  # whole or absent
