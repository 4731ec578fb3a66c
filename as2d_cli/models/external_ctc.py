"""An external CTC model exported to ONNX as a chunked As²d source (``kind: ctc-onnx``).

What the folder given to ``as2d models import --ctc DIR`` must hold (docs/models.md):

* one ONNX file (``model.onnx``, or the only ``*.onnx``) with ONE input, raw 16 kHz mono
  audio of shape (batch, samples), float32 — named ``input_values`` in Hugging Face
  exports (wav2vec2, HuBERT, ...) — and a first output of shape (batch, frames, V): logits or
  log-probabilities per frame (only their argmax is used);
* the vocabulary beside it: ``vocab.json`` (token -> id, Hugging Face CTC tokenizers) or
  ``tokens.txt`` / ``vocab.txt`` (one token per line, or ``token id`` per line). The blank
  is ``<pad>``, ``<blank>`` or ``<blk>``, or the extra last output when V is one more than
  the vocabulary (NeMo's convention);
* optionally ``preprocessor_config.json``; with ``do_normalize: true`` each chunk is scaled
  to zero mean and unit variance first, as the model's feature extractor does.

Each 2.56 s chunk is decoded greedily (repeats collapsed, blanks dropped, ``|`` and ``▁``
word marks turned into spaces, ``<s>``/``</s>``/``<unk>`` dropped) and its text converted
into the target's tokens with the target's tokenizer (paper A.1's conversion).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from as2d_cli.errors import UserError
from as2d_cli.formats.common import sha256_file
from as2d_cli.models.ctc import CHUNK_SECONDS, ChunkedRecognizer, greedy_ctc
from as2d_cli.models.session import make_session

BLANKS = ("<pad>", "<blank>", "<blk>")
DROP = ("<s>", "</s>", "<unk>", "<bos>", "<eos>")
CTC_HINT = "see docs/models.md, 'External CTC sources', for what the folder must hold"


def read_tokens(folder: Path) -> tuple[list[str], str]:
    """The vocabulary as a list indexed by id, and the file it came from."""
    vj = folder / "vocab.json"
    if vj.is_file():
        try:
            mapping = json.loads(vj.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{vj} is not valid JSON ({exc}); {CTC_HINT}") from None
        if not isinstance(mapping, dict) or not all(isinstance(v, int) for v in mapping.values()):
            raise UserError(f"{vj} must map each token to its integer id; {CTC_HINT}")
        tokens = [""] * (max(mapping.values()) + 1)
        for t, i in mapping.items():
            tokens[i] = t
        return tokens, vj.name
    for name in ("tokens.txt", "vocab.txt"):
        f = folder / name
        if f.is_file():
            lines = [
                ln.rstrip("\n") for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()
            ]
            parts = [ln.rsplit(" ", 1) for ln in lines]
            if all(len(p) == 2 and p[1].isdigit() for p in parts):
                tokens = [""] * (max(int(p[1]) for p in parts) + 1)
                for t, i in parts:
                    tokens[int(i)] = t
                return tokens, name
            return lines, name
    raise UserError(f"{folder} has no vocabulary (vocab.json, tokens.txt or vocab.txt); {CTC_HINT}")


def _onnx_file(folder: Path) -> Path:
    if (folder / "model.onnx").is_file():
        return folder / "model.onnx"
    found = sorted(folder.glob("*.onnx"))
    if len(found) != 1:
        raise UserError(
            f"{folder} must hold model.onnx or exactly one .onnx file (found {len(found)}); {CTC_HINT}"
        )
    return found[0]


def import_ctc(folder: Path, work: Path, copy: bool, target_tokenizer: Path) -> dict[str, Any]:
    """Validate a CTC folder and return its manifest entry (files placed under ``work/ctc``)."""
    import onnxruntime as ort

    if not folder.is_dir():
        raise UserError(f"--ctc {folder} is not a folder; {CTC_HINT}")
    model = _onnx_file(folder)
    tokens, vocab_name = read_tokens(folder)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for bad files
        raise UserError(
            f"ONNX Runtime cannot load {model} ({str(exc).splitlines()[0]}); {CTC_HINT}"
        ) from None
    ins, outs = sess.get_inputs(), sess.get_outputs()
    if len(ins) != 1 or len(ins[0].shape) != 2 or ins[0].type != "tensor(float)":
        raise UserError(
            f"{model} must take one float input of shape (batch, samples) (raw 16 kHz audio); it takes "
            f"{[(i.name, i.shape, i.type) for i in ins]}; {CTC_HINT}"
        )
    width = outs[0].shape[-1] if len(outs[0].shape) == 3 else None
    if width is None:
        raise UserError(
            f"{model}'s first output must be (batch, frames, vocabulary); it is {outs[0].shape}; {CTC_HINT}"
        )
    blank = next((tokens.index(b) for b in BLANKS if b in tokens), None)
    if isinstance(width, int):
        if width == len(tokens) + 1 and blank is None:
            blank = len(tokens)
        elif width != len(tokens):
            raise UserError(
                f"{model} scores {width} tokens but {folder / vocab_name} lists {len(tokens)}; {CTC_HINT}"
            )
    if blank is None:
        raise UserError(
            f"{folder / vocab_name} names no blank token ({', '.join(BLANKS)}); {CTC_HINT}"
        )
    normalize = False
    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        try:
            normalize = bool(json.loads(pre.read_text(encoding="utf-8")).get("do_normalize", False))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{pre} is not valid JSON ({exc}); {CTC_HINT}") from None
    (work / "ctc").mkdir(parents=True, exist_ok=True)
    shutil.copy2(folder / vocab_name, work / "ctc" / vocab_name)
    if copy:
        shutil.copy2(model, work / "ctc" / model.name)
        model_ref = f"ctc/{model.name}"
    else:
        model_ref = str(model.resolve())
    files = {"model": model_ref, "vocab": f"ctc/{vocab_name}"}
    return {
        "kind": "ctc-onnx",
        "source": str(folder.resolve()),
        "input": ins[0].name,
        "blank": int(blank),
        "normalize": normalize,
        "chunk_seconds": CHUNK_SECONDS,
        "languages": ["en"],
        "dims": {"vocab": len(tokens)},
        "files": files,
        "sha256": {f: sha256_file(work / f) for f in files.values()},
    }


class ExternalCtc(ChunkedRecognizer):
    """The imported CTC model, with the bundled recognizer's interface (transcribe, eligible)."""

    def __init__(self, pair: Any, threads: int = 1) -> None:
        info = pair.model("ctc")
        self.session = make_session(
            pair.path(info["files"]["model"]),
            threads,
            "re-import the pair with `as2d models import --ctc`",
        )
        self.input = str(info.get("input", self.session.get_inputs()[0].name))
        vocab_path = pair.path(info["files"]["vocab"])
        self.tokens, _ = read_tokens(
            vocab_path.parent
        )  # the pair's ctc/ folder holds only this vocabulary
        self.blank = int(info["blank"])
        self.normalize = bool(info.get("normalize", False))
        self._chunking(pair, info)

    def transcribe(self, samples: np.ndarray) -> str:
        if len(samples) < 400:  # shorter than one 25 ms frame: no speech
            return ""
        x = np.asarray(samples, dtype=np.float32)
        if self.normalize:
            x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        out = self.session.run(None, {self.input: x[None]})[0][0]
        pieces = [
            self.tokens[i]
            for i in greedy_ctc(out.argmax(axis=-1), self.blank)
            if i < len(self.tokens)
        ]
        pieces = [p for p in pieces if p not in DROP and p not in BLANKS]
        text = "".join(pieces).replace("|", " ").replace("▁", " ")
        return " ".join(text.split())
