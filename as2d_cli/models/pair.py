"""`as2d models import`: turn a user's exported models into a model-pair folder.

A pair folder holds ``models.json`` (schema ``as2d.models`` version 3, docs/models.md), the
target's ``tokenizer.json``, each model's ``config.json`` and ``generation_config.json`` (an
audio LLM's tokenizer and preprocessor configs too; a drafter with a tokenizer of its own,
its ``tokenizer.json``), and the ONNX files — copied into the folder (``copy=True``) or
referenced by absolute path — each with its SHA-256. Each model is read by its
``config.json``'s ``model_type``: ``whisper`` (:mod:`as2d_cli.models.whisper`) or an audio
language model (:mod:`as2d_cli.models.audio_llm_export`). A drafter whose tokenizer is not
the target's drafts through the text conversion (``conversion: text``,
:mod:`as2d_cli.models.conversion`); one that shares it, directly (``conversion: none``). The folder is written under a temporary name and renamed only when whole,
so a refused or interrupted import leaves nothing behind; an existing folder is never
overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

from as2d_cli import __version__
from as2d_cli.errors import UserError
from as2d_cli.formats.common import sha256_file
from as2d_cli.models.audio_llm_export import AudioLlmExport
from as2d_cli.models.model_pair import SCHEMA, VERSION
from as2d_cli.models.prompting import TASKS, WHISPER_TASKS
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


def tokenizer_differences(a: Path, b: Path) -> list[int]:
    """The ids whose tokens differ between two tokenizers (empty: one tokenizer)."""
    va, vb = _vocab(a), _vocab(b)
    return sorted(i for i in set(va) | set(vb) if va.get(i) != vb.get(i))


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


def _hashed(entry: dict[str, Any], work: Path, extra: list[str]) -> dict[str, Any]:
    entry["sha256"] = {f: sha256_file(work / f) for f in [*entry["files"].values(), *extra]}
    return entry


def _whisper_entry(
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
    entry = {
        "kind": "whisper-onnx",
        "source": str(export.directory.resolve()),
        "layout": export.layout,
        "variant": export.variant,
        "decoder": "merged" if export.merged else "split",
        "task": task,
        "dims": dims,
        "files": files,
        "external_data": extra,
    }
    return _hashed(entry, work, extra)


def _audio_llm_entry(
    role: str, export: AudioLlmExport, dims: dict, work: Path, copy: bool, task: str
) -> dict[str, Any]:
    files = {
        key: _place(src, work, f"{role}/{src.name}", copy)
        for key, src in (
            ("encoder", export.encoder),
            ("embed", export.embed),
            ("decoder", export.decoder),
        )
    }
    extra = [_place(p, work, f"{role}/{p.name}", copy) for p in export.external_data()]
    (work / role).mkdir(parents=True, exist_ok=True)
    for key, meta in (
        ("config", "config.json"),
        ("generation", "generation_config.json"),
        ("tokenizer_config", "tokenizer_config.json"),
        ("preprocessor", "preprocessor_config.json"),
    ):
        shutil.copy2(export.directory / meta, work / role / meta)
        files[key] = f"{role}/{meta}"
    entry = {
        "kind": "audio-llm-onnx",
        "source": str(export.directory.resolve()),
        "layout": export.layout,
        "variant": export.variant,
        "task": task,
        "dims": dims,
        "chat_template": export.chat_template,
        "files": files,
        "external_data": extra,
    }
    return _hashed(entry, work, extra)


@dataclass
class _Model:
    """One export being imported: its kind, files, tokenizer and special ids."""

    kind: str
    export: Any
    tokenizer: Path
    specials: dict[str, int]

    @property
    def directory(self) -> Path:
        return Path(self.export.directory)


def _id(value: Any, where: Path, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UserError(
            f"{where}: {key} is {value!r}, not a token id; the importer needs the model's start and "
            "end-of-text tokens: export the model with its generation config"
        )
    return int(value)


def _read(directory: Path, variant: str | None) -> _Model:
    """Read one export folder by its config.json's model_type."""
    from as2d_cli.models.audio_llm_export import (
        MODEL_TYPES,
        eos_ids,
        find_audio_llm_export,
        model_type_of,
    )

    directory = Path(directory)
    if model_type_of(directory) in MODEL_TYPES:
        a = find_audio_llm_export(directory, variant)
        end = eos_ids(a.generation, a.config)[0]
        fill = a.generation.get("pad_token_id")
        fill = fill if isinstance(fill, int) and not isinstance(fill, bool) else end
        specials = {"sot": end, "eot": end, "pad": fill}
        return _Model("audio-llm-onnx", a, directory / "tokenizer.json", specials)
    w = find_export(directory, variant)
    gen, where = w.generation, w.directory / "generation_config.json"
    eos: Any = gen.get("eos_token_id")  # a JSON value: an id, or a list whose first is EOS
    eos = _id(eos[0] if isinstance(eos, list) and eos else eos, where, "eos_token_id")
    sot = _id(gen.get("decoder_start_token_id"), where, "decoder_start_token_id")
    pad = gen.get("pad_token_id")
    pad = pad if isinstance(pad, int) and not isinstance(pad, bool) else eos
    return _Model(
        "whisper-onnx", w, directory / "tokenizer.json", {"sot": sot, "eot": eos, "pad": pad}
    )


def _whisper_task(task: str, target_kind: str) -> str:
    """A Whisper model's task token: the pair's task, except that a Whisper drafter for an
    audio LLM's spoken answers transcribes."""
    return task if task in WHISPER_TASKS or target_kind == "whisper-onnx" else "transcribe"


def _dims(m: _Model) -> dict[str, Any]:
    if m.kind == "audio-llm-onnx":
        from tokenizers import Tokenizer

        from as2d_cli.models.audio_llm_export import audio_llm_dims

        return audio_llm_dims(m.export, Tokenizer.from_file(str(m.tokenizer)))
    return whisper_dims(m.export, len(_vocab(m.tokenizer)))


def unencodable(drafter_tok: Path, target_tok: Path) -> list[str]:
    """The drafter's ordinary tokens whose text the target's tokenizer turns into its unknown
    token (their drafts could never be verified): none for a byte-level or byte-fallback target."""
    from tokenizers import Tokenizer

    d, t = Tokenizer.from_file(str(drafter_tok)), Tokenizer.from_file(str(target_tok))
    unk_tok = getattr(t.model, "unk_token", None)
    unk = t.token_to_id(unk_tok) if unk_tok else None
    if unk is None:
        return []
    special = {tok for tok, i in d.get_vocab(with_added_tokens=True).items()} - set(
        d.get_vocab(with_added_tokens=False)
    )
    ids = [
        i
        for tok, i in sorted(d.get_vocab(with_added_tokens=False).items(), key=lambda x: x[1])
        if tok not in special
    ]
    texts = d.decode_batch([[i] for i in ids], skip_special_tokens=True)
    texts = [x for x in texts if x.strip() and "\ufffd" not in x]
    bad = [
        x
        for x, enc in zip(texts, t.encode_batch(texts, add_special_tokens=False))
        if unk in enc.ids
    ]
    return bad


class PairOptions(TypedDict, total=False):
    """``import_pair``'s options: ``ctc``, an optional CTC model folder; ``variant`` /
    ``drafter_variant``, the ONNX variant of each export; ``copy``, copy the files instead of
    linking them; ``name`` (default: the folder's); ``task``; ``drafter_reads_target_encoder``:
    the drafter reads the target's encoder states (a distilled Whisper drafter that kept its
    teacher's encoder; an audio-LLM drafter whose audio encoder file is the target's), so a
    request is encoded once, by the target."""

    ctc: Path | None
    variant: str | None
    drafter_variant: str | None
    copy: bool
    name: str | None
    task: str
    drafter_reads_target_encoder: bool


def import_pair(
    target: Path,
    drafter: Path,
    out: Path,
    *,
    progress: Callable[[str], None] | None = None,
    **options: Unpack[PairOptions],
) -> Path:
    """Validate a target and a drafter export (Whisper or audio LLM, in any combination;
    and an optional CTC model) and write the pair folder ``out``. Returns ``out``."""
    say = progress or (lambda _msg: None)
    out = Path(out)
    task = options.get("task", "transcribe")
    shared = options.get("drafter_reads_target_encoder", False)
    if out.exists():
        raise UserError(f"{out} already exists and is never overwritten; choose another --out")
    if task not in TASKS:
        raise UserError(f"unknown --task {task!r}; use one of {', '.join(TASKS)}")
    say(f"reading {target}")
    t = _read(Path(target), options.get("variant"))
    say(f"reading {drafter}")
    d = _read(Path(drafter), options.get("drafter_variant"))
    if t.kind == "whisper-onnx" and task not in WHISPER_TASKS:
        raise UserError(
            f"--task {task} needs an audio language model; {t.directory} is a Whisper model "
            "(tasks: transcribe, translate)"
        )
    diff = _check_tokenizers(t, d)
    for m in (t, d):
        if m.kind == "whisper-onnx":
            build_prompt(
                m.export.generation,
                _whisper_task(task, t.kind),
                None,
                str(m.directory / "generation_config.json"),
            )
    say("checking the ONNX files")
    dims = {"target": _dims(t), "drafter": _dims(d)}
    if shared:
        _check_shared_encoder(t, d, dims["target"], dims["drafter"])
    work = out.parent / f".{out.name}.importing-{os.getpid()}"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        work.mkdir()
        shutil.copy2(t.tokenizer, work / "tokenizer.json")
        say("hashing" + (" and copying" if options.get("copy", False) else "") + " the model files")
        models = _model_entries(work, {"target": t, "drafter": d}, dims, diff, options)
        _write_manifest(work, out, t, models, options)
        from as2d_cli.models.model_pair import load_pair

        load_pair(work, check_hashes=False)  # what we wrote must load (hashed just now)
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out


def _check_tokenizers(t: _Model, d: _Model) -> list[int]:
    """The tokenizers' differences (empty: the same tokenizer, whose prompt and EOS tokens
    the two exports must then agree on); refused when the target cannot encode the text of
    every drafter token, since such drafts could never be verified."""
    diff = tokenizer_differences(t.tokenizer, d.tokenizer)
    if not diff:
        for key in ("sot", "eot"):
            if t.kind == d.kind and t.specials[key] != d.specials[key]:
                raise UserError(
                    f"the target's and drafter's generation_config.json disagree on the "
                    f"{'start' if key == 'sot' else 'end-of-text'} token ({t.specials[key]} vs "
                    f"{d.specials[key]}); they must share the prompt and EOS"
                )
        return diff
    bad = unencodable(d.tokenizer, t.tokenizer)
    if bad:
        shown = ", ".join(repr(x) for x in bad[:3])
        raise UserError(
            f"the target's tokenizer {t.tokenizer} cannot encode the text of {len(bad)} of the "
            f"drafter's tokens ({d.tokenizer}; first: {shown}): their drafts could never be "
            "verified; use a drafter whose text the target can encode (a byte-level tokenizer "
            "encodes any text)"
        )
    return diff


def _check_shared_encoder(t: _Model, d: _Model, dims_t: dict, dims_d: dict) -> None:
    """A drafter can read the target's encoder states as a Whisper drafter of a Whisper
    target of the same width and mel bins, or as an audio LLM whose audio encoder is the
    audio-LLM target's own file (the same bytes: the target's audio embeddings are then
    exactly the drafter's, and only the encoding is saved)."""
    if t.kind == d.kind == "whisper-onnx":
        if (dims_t["d"], dims_t["n_mels"]) == (dims_d["d"], dims_d["n_mels"]):
            return
        what = (
            f"width {dims_d.get('d')} and {dims_d.get('n_mels')} mel bins, the target "
            f"{dims_t.get('d')} and {dims_t.get('n_mels')}"
        )
    elif t.kind == d.kind == "audio-llm-onnx":
        if sha256_file(d.export.encoder) == sha256_file(t.export.encoder):
            return
        what = (
            f"an audio encoder ({d.export.encoder.name}) that is not the target's "
            f"({t.export.encoder.name}, other bytes)"
        )
    else:
        what = "another architecture than the target's (Whisper and Whisper, or audio LLMs)"
    raise UserError(
        f"the drafter ({d.directory}) has {what}: it cannot read the target's encoder states; "
        "drop --drafter-reads-target-encoder"
    )


def _model_entries(
    work: Path,
    exports: dict[str, _Model],
    dims: dict[str, dict],
    diff: list[int],
    options: PairOptions,
) -> dict[str, Any]:
    """The manifest's ``models`` (target, drafter, and the CTC model when given), their
    files hashed (and copied) into ``work``."""
    copy = options.get("copy", False)
    task = options.get("task", "transcribe")
    t = exports["target"]
    models: dict[str, Any] = {}
    for role, m in exports.items():
        if m.kind == "audio-llm-onnx":
            models[role] = _audio_llm_entry(role, m.export, dims[role], work, copy, task)
        else:
            models[role] = _whisper_entry(
                role, m.export, dims[role], work, copy, _whisper_task(task, t.kind)
            )
    dr = models["drafter"]
    dr["conversion"] = "text" if diff else "none"
    if diff:  # the drafter keeps its own tokenizer: its text is converted into the target's
        shutil.copy2(exports["drafter"].tokenizer, work / "drafter" / "tokenizer.json")
        dr["tokenizer"], dr["specials"] = "drafter/tokenizer.json", exports["drafter"].specials
        dr["sha256"]["drafter/tokenizer.json"] = sha256_file(work / "drafter" / "tokenizer.json")
    if options.get("drafter_reads_target_encoder", False):
        # the drafter's own encoder is not used: name the target's
        tg = models["target"]
        dr["sha256"].pop(dr["files"]["encoder"], None)
        if copy:
            (work / dr["files"]["encoder"]).unlink(missing_ok=True)
        dr["files"]["encoder"] = tg["files"]["encoder"]
        dr["sha256"][tg["files"]["encoder"]] = tg["sha256"][tg["files"]["encoder"]]
        dr["encoder_from"] = "target"
    ctc = options.get("ctc")
    if ctc is not None:
        from as2d_cli.models.external_ctc import import_ctc

        models["ctc"] = import_ctc(Path(ctc), work, copy, t.tokenizer)
    return models


def _write_manifest(
    work: Path, out: Path, t: _Model, models: dict[str, Any], options: PairOptions
) -> None:
    """``models.json`` of the pair folder being written in ``work``."""
    manifest = {
        "schema": SCHEMA,
        "version": VERSION,
        "name": options.get("name") or out.name,
        "tokenizer": "tokenizer.json",
        "specials": t.specials,
        "sample_rate": 16000,
        "features": "Whisper log-mel (n_mels per model, 30 s window), as2d_cli.models.whisper_features",
        "sha256": {"tokenizer.json": sha256_file(work / "tokenizer.json")},
        "models": models,
        "imported": {
            "by": "as2d models import",
            "toolkit_version": __version__,
            "copied": options.get("copy", False),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    (work / "models.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
