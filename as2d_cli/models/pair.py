"""`as2d models import`: turn a user's exported models into a model-pair folder.

A pair folder holds ``models.json`` (schema ``as2d.models`` version 3, docs/models.md), the
shared ``tokenizer.json``, each model's ``config.json`` and ``generation_config.json``, and
the ONNX files — copied into the folder (``copy=True``) or referenced by absolute path — each
with its SHA-256. The folder is written under a temporary name and renamed only when whole,
so a refused or interrupted import leaves nothing behind; an existing folder is never
overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from as2d_cli import __version__
from as2d_cli.errors import UserError
from as2d_cli.formats.common import sha256_file
from as2d_cli.models.bundle import SCHEMA, VERSION
from as2d_cli.models.whisper import HINT, WhisperExport, build_prompt, find_export


def _vocab(path: Path) -> dict[int, str]:
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own exception types
        raise UserError(
            f"{path} cannot be read by the tokenizers library ({exc}); save the model's fast tokenizer"
        ) from None
    return {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}


def compare_tokenizers(a: Path, b: Path) -> None:
    """Refuse two tokenizers that differ anywhere, naming the ids that differ."""
    va, vb = _vocab(a), _vocab(b)
    diff = sorted(i for i in set(va) | set(vb) if va.get(i) != vb.get(i))
    if diff:
        shown = ", ".join(f"{i} ({va.get(i)!r} vs {vb.get(i)!r})" for i in diff[:3])
        raise UserError(
            f"the drafter's tokenizer {b} differs from the target's {a} at {len(diff)} id(s), first: {shown}; "
            "target and drafter must share one tokenizer exactly"
        )


def whisper_dims(export: WhisperExport, tokenizer_size: int) -> dict[str, int]:
    """The manifest's dims from config.json, checked against the ONNX files."""
    import onnxruntime as ort

    c = export.config
    where = export.directory / "config.json"
    try:
        d, heads = int(c["d_model"]), int(c["decoder_attention_heads"])
        dims = {
            "n_mels": int(c["num_mel_bins"]),
            "d": d,
            "dec_layers": int(c["decoder_layers"]),
            "heads": heads,
            "head_dim": d // heads,
            "vocab": int(c["vocab_size"]),
            "max_tokens": int(c["max_target_positions"]),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: key {exc} is missing or not a number; {HINT}") from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        enc = ort.InferenceSession(str(export.encoder), opts, providers=["CPUExecutionProvider"])
        dec = ort.InferenceSession(str(export.decoder), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own exception types for bad files
        raise UserError(
            f"ONNX Runtime cannot load {export.encoder.parent}'s model files ({str(exc).splitlines()[0]}); {HINT}"
        ) from None
    shape = enc.get_inputs()[0].shape
    if len(shape) != 3 or shape[1] != dims["n_mels"]:
        raise UserError(
            f"{export.encoder} takes features of shape {shape} but {where} says num_mel_bins "
            f"{dims['n_mels']}: the export and its config do not match; {HINT}"
        )
    past_names = {f"past_key_values.{i}.decoder.key" for i in range(dims["dec_layers"])}
    checks = [
        (
            export.decoder,
            dec,
            {"input_ids", "encoder_hidden_states"}
            | ({"use_cache_branch", *past_names} if export.merged else set()),
        )
    ]
    if export.with_past is not None:
        try:
            past = ort.InferenceSession(
                str(export.with_past), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ORT raises its own exception types for bad files
            raise UserError(
                f"ONNX Runtime cannot load {export.with_past} ({str(exc).splitlines()[0]}); {HINT}"
            ) from None
        checks.append((export.with_past, past, {"input_ids", *past_names}))
    for path, sess, want in checks:
        names = {i.name for i in sess.get_inputs()}
        if not want <= names:
            raise UserError(
                f"{path} lacks the inputs {sorted(want - names)} of an Optimum Whisper decoder with "
                f"{dims['dec_layers']} layers; {HINT}"
            )
    logits = dec.get_outputs()[0].shape
    if isinstance(logits[-1], int) and logits[-1] != dims["vocab"]:
        raise UserError(
            f"{export.decoder} has {logits[-1]} output tokens but {where} says vocab_size {dims['vocab']}; {HINT}"
        )
    if dims["vocab"] > tokenizer_size:
        raise UserError(
            f"{export.decoder}'s vocabulary ({dims['vocab']} tokens) exceeds its tokenizer's "
            f"({tokenizer_size}, {export.directory / 'tokenizer.json'}): the model can emit ids the tokenizer "
            "cannot decode; export the model with its own tokenizer"
        )
    return dims


def _place(src: Path, out_dir: Path, rel: str, copy: bool) -> str:
    """Copy ``src`` to ``out_dir/rel`` and return ``rel``, or return its absolute path."""
    if not copy:
        return str(src.resolve())
    dst = out_dir / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    return rel


def _entry(
    role: str, export: WhisperExport, dims: dict, work: Path, copy: bool, task: str
) -> dict[str, Any]:
    files: dict[str, str] = {}
    for key, src in (
        ("encoder", export.encoder),
        ("decoder", export.decoder),
        ("with_past", export.with_past),
    ):
        if src is not None:
            files[key] = _place(src, work, f"{role}/{src.name}", copy)
    extra = [_place(p, work, f"{role}/{p.name}", copy) for p in export.external_data()]
    for meta in ("config.json", "generation_config.json"):
        (work / role).mkdir(parents=True, exist_ok=True)
        shutil.copy2(export.directory / meta, work / role / meta)
    files["config"], files["generation"] = f"{role}/config.json", f"{role}/generation_config.json"
    hashed = [*files.values(), *extra]
    return {
        "kind": "whisper-onnx",
        "source": str(export.directory.resolve()),
        "layout": export.layout,
        "variant": export.variant,
        "decoder": "merged" if export.merged else "split",
        "task": task,
        "dims": dims,
        "files": files,
        "external_data": extra,
        "sha256": {f: sha256_file(work / f) for f in hashed},
    }


def import_pair(
    target: Path,
    drafter: Path,
    out: Path,
    *,
    ctc: Path | None = None,
    variant: str | None = None,
    drafter_variant: str | None = None,
    copy: bool = False,
    name: str | None = None,
    task: str = "transcribe",
    progress: Callable[[str], None] | None = None,
    drafter_reads_target_encoder: bool = False,
) -> Path:
    """Validate a Whisper target and drafter export (and an optional CTC model) and write
    the pair folder ``out``. Returns ``out``. ``drafter_reads_target_encoder``: the drafter's
    decoder reads the target's encoder states (a distilled drafter that kept its teacher's
    encoder), so a request is encoded once, by the target."""
    say = progress or (lambda _msg: None)
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists and is never overwritten; choose another --out")
    if task not in ("transcribe", "translate"):
        raise UserError(f"unknown --task {task!r}; use transcribe or translate")
    say(f"reading {target}")
    t = find_export(Path(target), variant)
    say(f"reading {drafter}")
    d = find_export(Path(drafter), drafter_variant)
    compare_tokenizers(t.directory / "tokenizer.json", d.directory / "tokenizer.json")
    for key in ("decoder_start_token_id", "eos_token_id"):
        if t.generation.get(key) != d.generation.get(key):
            raise UserError(
                f"the target's and drafter's generation_config.json disagree on {key} "
                f"({t.generation.get(key)} vs {d.generation.get(key)}); they must share the prompt and EOS"
            )
    size = len(_vocab(t.directory / "tokenizer.json"))
    for e in (t, d):
        build_prompt(e.generation, task, None, str(e.directory / "generation_config.json"))
    say("checking the ONNX files")
    dims_t, dims_d = whisper_dims(t, size), whisper_dims(d, size)
    if drafter_reads_target_encoder and (dims_t["d"], dims_t["n_mels"]) != (
        dims_d["d"],
        dims_d["n_mels"],
    ):
        raise UserError(
            f"the drafter ({d.directory}) has width {dims_d['d']} and {dims_d['n_mels']} mel bins, the "
            f"target {dims_t['d']} and {dims_t['n_mels']}: it cannot read the target's encoder states; "
            "drop --drafter-reads-target-encoder"
        )
    gen = t.generation
    eos: Any = gen.get("eos_token_id")  # a JSON value: an id, or a list whose first is EOS
    eos = eos[0] if isinstance(eos, list) and eos else eos
    for key, value in (
        ("decoder_start_token_id", gen.get("decoder_start_token_id")),
        ("eos_token_id", eos),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(
                f"{t.directory / 'generation_config.json'}: {key} is {value!r}, not a token id; "
                "the importer needs the target's start and end-of-text tokens: export the model with its generation config"
            )
    pad = gen.get("pad_token_id")
    pad = pad if isinstance(pad, int) and not isinstance(pad, bool) else eos
    work = out.parent / f".{out.name}.importing-{os.getpid()}"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        work.mkdir()
        shutil.copy2(t.directory / "tokenizer.json", work / "tokenizer.json")
        say("hashing" + (" and copying" if copy else "") + " the model files")
        models = {
            "target": _entry("target", t, dims_t, work, copy, task),
            "drafter": _entry("drafter", d, dims_d, work, copy, task),
        }
        if drafter_reads_target_encoder:  # the drafter's own encoder is not used: name the target's
            dr, tg = models["drafter"], models["target"]
            dr["sha256"].pop(dr["files"]["encoder"], None)
            if copy:
                (work / dr["files"]["encoder"]).unlink(missing_ok=True)
            dr["files"]["encoder"] = tg["files"]["encoder"]
            dr["sha256"][tg["files"]["encoder"]] = tg["sha256"][tg["files"]["encoder"]]
            dr["encoder_from"] = "target"
        if ctc is not None:
            from as2d_cli.models.external_ctc import import_ctc

            models["ctc"] = import_ctc(Path(ctc), work, copy, t.directory / "tokenizer.json")
        manifest = {
            "schema": SCHEMA,
            "version": VERSION,
            "name": name or out.name,
            "tokenizer": "tokenizer.json",
            "specials": {
                "sot": int(gen["decoder_start_token_id"]),
                "eot": int(eos),
                "pad": int(pad),
            },
            "sample_rate": 16000,
            "features": "Whisper log-mel (n_mels per model, 30 s window), as2d_cli.models.whisper_features",
            "sha256": {"tokenizer.json": sha256_file(work / "tokenizer.json")},
            "models": models,
            "imported": {
                "by": "as2d models import",
                "toolkit_version": __version__,
                "copied": copy,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        }
        (work / "models.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        from as2d_cli.models.bundle import load_bundle

        load_bundle(
            work, check_hashes=False, task=task
        )  # what we wrote must load (hashed just now)
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out
