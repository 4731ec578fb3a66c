"""Reading and writing ``as2d.trace`` v1 files (JSON Lines, optionally gzip).

Line 1 is the header (checked with the shipped JSON Schema, cheap: once per file); every
further line is one window, checked by a hand-written validator that is equivalent to
``schemas/trace-window.schema.json`` plus the cross-field rules a schema cannot state
(reference ends in EOS iff ``eos``, drafter shape, declared sources). The hand check keeps
loading ~700 windows with drafter continuations fast; ``strict=True`` additionally runs
the JSON Schema on every record. Every problem is one :class:`FormatError` line naming
the file, line, window id and key, and what to do; a key written twice in one record
is refused too (:mod:`as2d_cli.formats.strict`), never resolved silently.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import check_version, validate_schema, write_atomic
from as2d_cli.formats.strict import json_loads
from as2d_cli.formats.trace import (
    AUTOREGRESSIVE,
    CHUNKED,
    SCHEMA,
    VERSION,
    Chunk,
    DrafterTrace,
    SourceInfo,
    SourceTrace,
    TraceSet,
    WindowTrace,
)

HEADER_SCHEMA = "trace.schema.json"
WINDOW_SCHEMA = "trace-window.schema.json"
_FIX = "regenerate the trace or fix that record"
_WINDOW_KEYS = frozenset(
    {
        "id",
        "dataset",
        "split",
        "audio_seconds",
        "task",
        "language",
        "reference",
        "eos",
        "capped",
        "max_tokens",
        "sources",
        "drafter",
    }
)
_SOURCE_KEYS = frozenset({"kind", "eligible", "eos", "tokens", "confidences", "steps", "chunks"})


_INT = {int}
_FLOAT = {float}
_NUM = {int, float}


class _Bad(Exception):
    """A record problem: (key, message) — the caller adds file/line/window."""

    def __init__(self, key: str, msg: str) -> None:
        super().__init__(key, msg)
        self.key, self.msg = key, msg


# ------------------------------------------------------------------ reading
def _open_lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            yield from enumerate(f, 1)
    except FileNotFoundError:
        raise UserError(f"{path}: no such trace file; check the --traces path") from None
    except IsADirectoryError:
        raise UserError(
            f"{path}: is a folder, not a trace file; pass a .jsonl or .jsonl.gz file"
        ) from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise FormatError(
            f"{path}: gzip data is truncated or corrupt ({e}); copy the file again or regenerate it"
        ) from None
    except PermissionError:
        raise UserError(
            f"{path}: not readable (permission denied); fix its permissions or copy it"
        ) from None
    except UnicodeDecodeError:
        raise FormatError(
            f"{path}: not UTF-8 text (a .gz file without the .gz extension?); name gzip files *.jsonl.gz"
        ) from None


def _read_header(
    doc: Any, where: str, path: Path, split: str | None
) -> tuple[dict, int | None, dict[str, SourceInfo], str | None]:
    """The checked header line (upgraded to this version), the vocabulary size, the
    declared sources and the default source."""
    header = check_version(
        doc,
        schema=SCHEMA,
        version=VERSION,
        where=where,
        upgrades={1: _v1_to_v2},
        remedy_old="regenerate the traces with this toolkit",
    )
    validate_schema(header, HEADER_SCHEMA, where)
    vocab = header.get("vocab_size")
    tok_vocab = header["provenance"]["tokenizer"].get("vocab_size")
    if vocab is not None and tok_vocab is not None and vocab != tok_vocab:
        raise FormatError(
            f"{where}: key vocab_size: {vocab} disagrees with provenance.tokenizer.vocab_size {tok_vocab}; fix the header"
        )
    vocab = vocab if vocab is not None else tok_vocab
    declared = {
        n: SourceInfo(n, s["kind"], s.get("model", "")) for n, s in header["sources"].items()
    }
    default_source = header.get("default_source")
    if (
        default_source is not None
        and declared.get(default_source, SourceInfo("", "")).kind != AUTOREGRESSIVE
    ):
        raise FormatError(
            f"{where}: key default_source: {default_source!r} is not a declared autoregressive source; declare it under 'sources' or fix the name"
        )
    hsplit = header.get("split")
    if split is not None and hsplit is not None and hsplit != split:
        raise FormatError(
            f"{path}: holds the {hsplit!r} split but {split!r} was requested; pass the {split} trace file"
        )
    return header, vocab, declared, default_source


def load_traces(path: str | Path, *, split: str | None = None, strict: bool = False) -> TraceSet:
    """Load and validate a trace file. With ``split`` set, every window must belong to
    that split (a window from another split is refused, so test never mixes with dev)."""
    path = Path(path)
    header: dict | None = None
    windows: list[WindowTrace] = []
    seen: set[str] = set()
    declared: dict[str, SourceInfo] = {}
    eos_id = 0
    default_source: str | None = None
    vocab: int | None = None
    for lineno, line in _open_lines(path):
        if not line.strip():
            continue
        where = f"{path}: line {lineno}"
        try:
            doc = json_loads(line, where)  # a key written twice is refused, not overwritten
        except json.JSONDecodeError as e:
            raise FormatError(
                f"{where}: not valid JSON ({e.msg} at column {e.colno}); the file is truncated or damaged — {_FIX}"
            ) from None
        if header is None:
            header, vocab, declared, default_source = _read_header(doc, where, path, split)
            eos_id = header["eos_id"]
            continue
        wid = doc.get("id") if isinstance(doc, dict) else None
        wwhere = f"{where} (window {wid})" if isinstance(wid, str) else where
        if strict:
            validate_schema(doc, WINDOW_SCHEMA, wwhere)
        try:
            w = _window(doc, eos_id, vocab, declared, default_source)
        except _Bad as b:
            fix = "" if ";" in b.msg else f"; {_FIX}"  # the message may carry its own remedy
            raise FormatError(f"{wwhere}: key {b.key}: {b.msg}{fix}") from None
        if w.id in seen:
            raise FormatError(
                f"{wwhere}: window id {w.id!r} appears twice; remove the duplicate record"
            )
        seen.add(w.id)
        if header.get("split") is not None and w.split != header["split"]:
            raise FormatError(
                f"{wwhere}: key split: window is in split {w.split!r} but the file header says {header['split']!r}; fix the record or the header"
            )
        if split is not None and w.split != split:
            raise FormatError(
                f"{wwhere}: key split: window is in split {w.split!r} but {split!r} was requested; pass the {split} trace file or split the traces first"
            )
        windows.append(w)
    if header is None:
        raise FormatError(f"{path}: empty file, no header line; pass an {SCHEMA} file")
    expect = header["windows"]
    if len(windows) != expect:
        raise FormatError(
            f"{path}: header announces {expect} windows but the file holds {len(windows)}; the file is truncated or was edited — regenerate it"
        )
    prov = dict(header.get("provenance", {}))
    return TraceSet(prov, eos_id, declared, default_source, tuple(windows))


# ------------------------------------------------------------- validation
def _tokens(x: Any, key: str, vocab: int | None, allow_empty: bool = True) -> tuple[int, ...]:
    if type(x) is not list:
        raise _Bad(key, f"expected a list of token ids, got {type(x).__name__}")
    if x and set(map(type, x)) != _INT:
        i = next(i for i, t in enumerate(x) if type(t) is not int)
        raise _Bad(f"{key}[{i}]", f"expected an integer token id, got {x[i]!r}")
    if not x:
        if not allow_empty:
            raise _Bad(key, "must hold at least one token")
        return ()
    lo, hi = min(x), max(x)
    if lo < 0:
        raise _Bad(f"{key}[{x.index(lo)}]", f"token id {lo} is negative")
    if vocab is not None and hi >= vocab:
        raise _Bad(
            f"{key}[{x.index(hi)}]",
            f"token id {hi} is outside the vocabulary (size {vocab}); sources must map to target token ids",
        )
    return tuple(x)


def _confs(x: Any, key: str, n: int) -> tuple[float, ...] | None:
    if x is None:
        return None
    if type(x) is not list:
        raise _Bad(key, f"expected a list of confidences or null, got {type(x).__name__}")
    if len(x) != n:
        raise _Bad(key, f"{len(x)} confidences for {n} tokens; give one per token")
    if not x:
        return ()
    types = set(map(type, x))
    if types <= _NUM and 0.0 <= min(x) and max(x) <= 1.0:
        return tuple(x) if types == _FLOAT else tuple(float(c) for c in x)
    for i, c in enumerate(x):
        if (type(c) is not float and type(c) is not int) or not 0.0 <= c <= 1.0:
            raise _Bad(f"{key}[{i}]", f"confidence must be a number in [0, 1], got {c!r}")
    raise AssertionError("unreachable")


def _req(doc: dict, key: str, types: tuple[type, ...], prefix: str = "") -> Any:
    if key not in doc:
        raise _Bad(prefix + key, "missing")
    v = doc[key]
    if type(v) not in types:
        want = " or ".join(t.__name__ for t in types)
        raise _Bad(prefix + key, f"expected {want}, got {type(v).__name__} {v!r:.40}")
    return v


def _window(
    doc: Any,
    eos_id: int,
    vocab: int | None,
    declared: dict[str, SourceInfo],
    default_source: str | None,
) -> WindowTrace:
    if not isinstance(doc, dict):
        raise _Bad("(record)", f"expected a JSON object, got {type(doc).__name__}")
    extra = doc.keys() - _WINDOW_KEYS
    if extra:
        raise _Bad(
            sorted(extra)[0],
            "unknown key (a typo, or a newer trace version?); remove it or upgrade as2d",
        )
    wid = _req(doc, "id", (str,))
    dataset = _req(doc, "dataset", (str,))
    split = _req(doc, "split", (str,))
    audio = _req(doc, "audio_seconds", (int, float))
    if audio < 0:
        raise _Bad("audio_seconds", f"must be >= 0, got {audio}")
    task = _req(doc, "task", (str,))
    language = _req(doc, "language", (str,))
    ref = _tokens(_req(doc, "reference", (list,)), "reference", vocab, allow_empty=False)
    eos = _req(doc, "eos", (bool,))
    capped = _req(doc, "capped", (bool,))
    max_tokens = _req(doc, "max_tokens", (int,))
    if max_tokens < 1:
        raise _Bad("max_tokens", f"must be >= 1, got {max_tokens}")
    if len(ref) > max_tokens:
        raise _Bad("reference", f"{len(ref)} tokens exceed max_tokens {max_tokens}")
    if eos == capped:
        raise _Bad(
            "eos",
            "exactly one of 'eos' and 'capped' must be true (the reference ends at EOS or at the cap)",
        )
    if eos and ref[-1] != eos_id:
        raise _Bad("reference", f"eos is true but the last token is {ref[-1]}, not EOS {eos_id}")
    if capped and len(ref) != max_tokens:
        raise _Bad(
            "capped",
            f"capped is true but the reference has {len(ref)} tokens, not max_tokens {max_tokens}",
        )
    if eos_id in ref[:-1]:
        raise _Bad(f"reference[{ref.index(eos_id)}]", "EOS before the end of the reference")
    srcs_doc = _req(doc, "sources", (dict,))
    sources: dict[str, SourceTrace] = {}
    for name, s in srcs_doc.items():
        info = declared.get(name)
        if info is None:
            raise _Bad(
                f"sources.{name}",
                f"unknown source (the header declares {', '.join(sorted(declared)) or 'none'}); declare it in the header or drop it",
            )
        sources[name] = _source(s, info, f"sources.{name}.", vocab)
        _ends_at_its_end(sources[name], eos_id, f"sources.{name}.")
    missing = sorted(set(declared) - set(sources))
    if missing:
        raise _Bad(
            f"sources.{missing[0]}",
            "declared in the header but missing from this window; give it (with eligible: false if it cannot serve the language)",
        )
    dr = doc.get("drafter")
    drafter = None if dr is None else _drafter(dr, len(ref), vocab)
    return WindowTrace(
        wid,
        dataset,
        split,
        float(audio),
        task,
        language,
        ref,
        eos,
        capped,
        max_tokens,
        eos_id,
        sources,
        drafter,
        default_source,
    )


def _ends_at_its_end(src: SourceTrace, eos_id: int, p: str) -> None:
    """A source ends at its own end: nothing after its EOS, and an end marked (``eos``)
    only on an EOS token (docs/formats.md)."""
    toks = src.tokens
    if eos_id in toks[:-1]:
        raise _Bad(
            f"{p}tokens[{toks.index(eos_id) + 1}]",
            "a token after the source's own EOS; a source ends at its EOS — cut what follows it",
        )
    if src.eos and toks and toks[-1] != eos_id:
        raise _Bad(
            p + "eos",
            f"is true but the last token is {toks[-1]}, not EOS {eos_id}; set it false (the "
            "source stopped at its cap) or end the tokens with EOS",
        )


def _source(s: Any, info: SourceInfo, p: str, vocab: int | None) -> SourceTrace:
    if type(s) is not dict:
        raise _Bad(p[:-1], f"expected an object, got {type(s).__name__}")
    extra = s.keys() - _SOURCE_KEYS
    if extra:
        raise _Bad(p + sorted(extra)[0], "unknown key; remove it")
    kind = s.get("kind", info.kind)
    if kind != info.kind:
        raise _Bad(p + "kind", f"{kind!r} disagrees with the header's {info.kind!r}")
    eligible = _req(s, "eligible", (bool,), p)
    eos = s.get("eos", True)
    if type(eos) is not bool:
        raise _Bad(p + "eos", f"expected bool, got {eos!r}")
    if kind == AUTOREGRESSIVE:
        if "chunks" in s:
            raise _Bad(p + "chunks", "an autoregressive source has no chunks")
        toks = _tokens(_req(s, "tokens", (list,), p), p + "tokens", vocab)
        conf = _confs(s.get("confidences"), p + "confidences", len(toks))
        return SourceTrace(kind, toks, conf, None, eos, eligible, _steps(s, p, len(toks)))
    chunks_doc = _req(s, "chunks", (list,), p)
    chunks: list[Chunk] = []
    flat: list[int] = []
    last_end = 0.0
    for i, c in enumerate(chunks_doc):
        q = f"{p}chunks[{i}]."
        if type(c) is not dict:
            raise _Bad(q[:-1], "expected an object with tokens and audio_end_s")
        ct = _tokens(_req(c, "tokens", (list,), q), q + "tokens", vocab)
        end = _req(c, "audio_end_s", (int, float), q)
        if end < last_end:
            raise _Bad(
                q + "audio_end_s",
                f"{end} is before the previous chunk's end {last_end}; chunks must be in audio order",
            )
        last_end = end
        cc = _confs(c.get("confidences"), q + "confidences", len(ct))
        chunks.append(Chunk(ct, float(end), cc))
        flat.extend(ct)
    if "tokens" in s and tuple(s["tokens"]) != tuple(flat):
        raise _Bad(
            p + "tokens", "differ from the chunks' tokens concatenated; drop 'tokens' or fix it"
        )
    conf = None
    if chunks and all(c.confidences is not None for c in chunks):
        conf = tuple(x for c in chunks for x in c.confidences)  # type: ignore[union-attr]
    return SourceTrace(kind, tuple(flat), conf, tuple(chunks), eos, eligible)


def _v1_to_v2(doc: dict) -> dict:
    """Version 2 only adds the optional ``steps`` of an autoregressive source."""
    return {**doc, "version": 2}


def _steps(s: dict, p: str, n: int) -> tuple[int, ...] | None:
    """An autoregressive source's tokens per producer step (None: one per step)."""
    x = s.get("steps")
    if x is None:
        return None
    if type(x) is not list or any(type(k) is not int or k < 1 for k in x):
        raise _Bad(p + "steps", "expected a list of positive integers (tokens per step)")
    if sum(x) != n:
        raise _Bad(
            p + "steps", f"sum to {sum(x)} for {n} tokens; they must account for every token"
        )
    return tuple(x)


def _drafter(d: Any, n_ref: int, vocab: int | None) -> DrafterTrace:
    if type(d) is not dict:
        raise _Bad("drafter", f"expected an object or null, got {type(d).__name__}")
    cap = _req(d, "cap", (int,), "drafter.")
    if cap < 1:
        raise _Bad("drafter.cap", f"must be >= 1, got {cap}")
    conts = _req(d, "continuations", (list,), "drafter.")
    if len(conts) not in (n_ref - 1, n_ref) or (n_ref > 1 and not conts):
        raise _Bad(
            "drafter.continuations",
            f"{len(conts)} positions for a {n_ref}-token reference; give one per target-path position (at least {n_ref - 1})",
        )
    confs = d.get("confidences")
    if confs is not None and (type(confs) is not list or len(confs) != len(conts)):
        raise _Bad("drafter.confidences", "must be null or one list per continuation")
    # Whole-matrix fast path (one type/range scan); the per-row path finds the culprit.
    if (
        all(type(c) is list for c in conts)
        and set(map(len, conts)) <= {cap}
        and (
            confs is None or (all(type(c) is list for c in confs) and set(map(len, confs)) <= {cap})
        )
    ):
        flat = list(chain.from_iterable(conts))
        ok = not flat or (
            set(map(type, flat)) == _INT and min(flat) >= 0 and (vocab is None or max(flat) < vocab)
        )
        if ok and confs is not None:
            fc = list(chain.from_iterable(confs))
            ok = not fc or (set(map(type, fc)) == _FLOAT and min(fc) >= 0.0 and max(fc) <= 1.0)
        if ok:
            return DrafterTrace(
                cap, tuple(map(tuple, conts)), None if confs is None else tuple(map(tuple, confs))
            )
    out_t: list[tuple[int, ...]] = []
    out_c: list[tuple[float, ...]] = []
    for i, c in enumerate(conts):
        t = _tokens(c, f"drafter.continuations[{i}]", vocab)
        if len(t) != cap:
            raise _Bad(
                f"drafter.continuations[{i}]", f"{len(t)} tokens, expected exactly cap={cap}"
            )
        out_t.append(t)
        if confs is not None:
            out_c.append(_confs(confs[i], f"drafter.confidences[{i}]", cap))  # type: ignore[arg-type]
    return DrafterTrace(cap, tuple(out_t), tuple(out_c) if confs is not None else None)


# ----------------------------------------------------------------- writing
def header_record(ts: TraceSet, split: str | None = None) -> dict:
    h: dict[str, Any] = {
        "schema": SCHEMA,
        "version": VERSION,
        "provenance": dict(ts.provenance),
        "eos_id": ts.eos_id,
        "sources": {n: {"kind": s.kind, "model": s.model} for n, s in ts.sources.items()},
        "windows": len(ts.windows),
    }
    vocab = (
        ts.provenance.get("tokenizer", {}).get("vocab_size")
        if isinstance(ts.provenance.get("tokenizer"), dict)
        else None
    )
    if vocab is not None:
        h["vocab_size"] = vocab
    if ts.default_source is not None:
        h["default_source"] = ts.default_source
    if split is not None:
        h["split"] = split
    return h


def window_record(w: WindowTrace) -> dict:
    rec: dict[str, Any] = {
        "id": w.id,
        "dataset": w.dataset,
        "split": w.split,
        "audio_seconds": w.audio_seconds,
        "task": w.task,
        "language": w.language,
        "reference": list(w.reference),
        "eos": w.eos,
        "capped": w.capped,
        "max_tokens": w.max_tokens,
        "sources": {},
    }
    for name, s in w.sources.items():
        if s.kind == CHUNKED:
            chunks = []
            for c in s.chunks or ():
                cd: dict[str, Any] = {"tokens": list(c.tokens), "audio_end_s": c.audio_end_s}
                if c.confidences is not None:
                    cd["confidences"] = list(c.confidences)
                chunks.append(cd)
            rec["sources"][name] = {"chunks": chunks, "eos": s.eos, "eligible": s.eligible}
        else:
            rec["sources"][name] = {
                "tokens": list(s.tokens),
                "confidences": None if s.confidences is None else list(s.confidences),
                "eos": s.eos,
                "eligible": s.eligible,
            }
            if s.steps is not None:
                rec["sources"][name]["steps"] = list(s.steps)
    if w.drafter is not None:
        rec["drafter"] = {
            "cap": w.drafter.cap,
            "continuations": [list(c) for c in w.drafter.continuations],
            "confidences": None
            if w.drafter.confidences is None
            else [list(c) for c in w.drafter.confidences],
        }
    return rec


def dump_traces(ts: TraceSet, split: str | None = None) -> bytes:
    """The JSON Lines text of a trace set (uncompressed bytes)."""
    out = io.StringIO()
    out.write(json.dumps(header_record(ts, split), separators=(",", ":")) + "\n")
    for w in ts.windows:
        out.write(json.dumps(window_record(w), separators=(",", ":")) + "\n")
    return out.getvalue().encode("utf-8")


def write_traces(
    path: str | Path, ts: TraceSet, *, split: str | None = None, force: bool = False
) -> Path:
    """Write atomically; ``.gz`` compresses. Refuses to overwrite unless ``force``."""
    path = Path(path)
    if split is not None:
        bad = [w.id for w in ts.windows if w.split != split]
        if bad:
            raise UserError(
                f"window {bad[0]} is in split {ts.window(bad[0]).split!r}, not {split!r}; filter with TraceSet.by_split first"
            )
    data = dump_traces(ts, split)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return write_atomic(path, data, force=force)
