"""Reading and writing ``as2d.profile`` v2 (YAML; v1 files are read as v2 without context). See :mod:`as2d_cli.formats.profile`
for the in-memory model and ``docs/formats.md`` for the file layout."""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

from as2d_cli import __version__
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import check_version, git_commit, plain, validate_schema, write_atomic
from as2d_cli.formats.profile import (
    IN_LOOP_KINDS,
    SCHEMA,
    VERSION,
    ContextCosts,
    CostProfile,
    DrafterCosts,
    Fit,
    SourceCosts,
    implausibilities,
)
from as2d_cli.formats.strict import yaml_load

_K = re.compile(r"^K([1-9][0-9]*)$")


def _widths(d: dict | None) -> dict[int, float]:
    return {} if not d else {int(_K.match(k).group(1)): float(v) for k, v in d.items()}  # type: ignore[union-attr]


def _kkeys(d: dict[int, float]) -> dict[str, float]:
    return {f"K{k}": v for k, v in sorted(d.items())}


def read_yaml(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what} file; check the path") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a {what} file") from None
    except UnicodeDecodeError:
        raise FormatError(f"{path}: not UTF-8 text; pass a YAML {what} file") from None
    except PermissionError:
        raise UserError(f"{path}: not readable (permission denied); fix its permissions") from None
    if not text.strip():
        raise FormatError(
            f"{path}: the file is empty; pass an as2d {what} file (was it cut off while copying?)"
        )
    return yaml_load(text, str(path), "file")


def iso_dates(doc: Any) -> Any:
    """YAML reads an unquoted timestamp as a datetime; the formats store ISO strings."""
    if isinstance(doc, dict):
        for k in ("created",):
            if isinstance(doc.get(k), (datetime, date)):
                doc[k] = doc[k].isoformat()
    return doc


def profile_from_doc(doc: Any, where: str) -> CostProfile:
    doc = iso_dates(doc)
    doc = check_version(
        doc,
        schema=SCHEMA,
        version=VERSION,
        where=where,
        upgrades=_UPGRADES,
        remedy_old="recalibrate the device with `as2d calibrate`",
    )
    _check_in_loop(doc, where)  # before the schema: its messages name the exact family/kind
    validate_schema(doc, "profile.schema.json", where)
    _check_finite(doc["costs"], "costs", where)
    c = doc["costs"]
    idle = _widths(c["verify"]["idle_ms"])
    ratio = _widths(c["verify"]["concurrent_ratio"])
    extra = sorted(set(ratio) - set(idle))
    if extra:
        raise FormatError(
            f"{where}: key costs.verify.concurrent_ratio.K{extra[0]}: a ratio for a width with no idle measurement; measure K{extra[0]} idle or drop the ratio"
        )
    d = c.get("drafter")
    drafter = (
        None
        if d is None
        else DrafterCosts(
            step_ms=float(d["step_ms"]),
            catch_up_ms=float(d["catch_up_ms"]),
            paired_ms=float(d["paired_ms"]),
            row_ms=float(d["row_ms"]),
            refresh_ms=_widths(d["refresh_ms"]),
            derived=d.get("derived"),
        )
    )
    sources = {}
    for name, s in (c.get("sources") or {}).items():
        own = _widths(s.get("verify_concurrent_ratio"))
        bad = sorted(set(own) - set(idle))
        if bad:
            raise FormatError(
                f"{where}: key costs.sources.{name}.verify_concurrent_ratio.K{bad[0]}: no idle measurement for that width; measure it or drop the ratio"
            )
        sources[name] = SourceCosts(
            name=name,
            kind=s["kind"],
            step_ms_idle=float(s.get("step_ms", 0.0)),
            chunk_ms_idle=float(s.get("chunk_ms", 0.0)),
            publish_ms=float(s["publish_ms"]),
            startup_ms=float(s["startup_ms"]),
            concurrent_ratio=float(s["concurrent_ratio"]),
            verify_concurrent_ratio=own or None,
            startup_ms_per_audio_s=float(s.get("startup_ms_per_audio_s", 0.0)),
            derived=s.get("derived"),
        )
    f = doc["fit"]
    fit = Fit(
        method=f["method"],
        samples={k: tuple(float(x) for x in v) for k, v in f["samples"].items()},
        notes=f.get("notes", ""),
    )
    return CostProfile(
        device=dict(doc["device"]),
        target_step_ms=float(c["target_step_ms"]),
        verify_idle_ms=idle,
        verify_concurrent_ratio=ratio,
        loop_ms=float(c["loop_ms"]),
        align_ms=float(c["align_ms"]),
        drafter=drafter,
        sources=sources,
        fit=fit,
        synthetic=bool(doc.get("synthetic", False)),
        created=str(doc["created"]),
        path=where,
        context=_context(c.get("context")),
        in_loop=_in_loop(c.get("in_loop")),
    )


def _v1_to_v2(doc: dict) -> dict:
    """v2 only adds optional fields: a v1 profile is a v2 profile without context terms."""
    return {**doc, "version": 2}


def _v2_to_v3(doc: dict) -> dict:
    """v3's source startup is idle (the replay applies the concurrent ratio). A v2 profile
    calibrated with native episodes (``costs.in_loop``) stored the startup observed beside
    the running target: divided by the source's ratio, it prices exactly as before."""
    costs = doc.get("costs")
    if not isinstance(costs, dict) or not costs.get("in_loop"):
        return {**doc, "version": 3}
    sources = {}
    for name, s in (costs.get("sources") or {}).items():
        r = s.get("concurrent_ratio") if isinstance(s, dict) else None
        if isinstance(r, (int, float)) and r > 0:
            s = {
                k: (v / r if k in _STARTUP_KEYS and isinstance(v, (int, float)) else v)
                for k, v in s.items()
            }
        sources[name] = s
    return {**doc, "version": 3, "costs": {**costs, "sources": sources}}


_STARTUP_KEYS = ("startup_ms", "startup_ms_per_audio_s")
_UPGRADES = {1: _v1_to_v2, 2: _v2_to_v3}


def _context(d: dict | None) -> ContextCosts | None:
    if not d:
        return None
    t, dr = d.get("target") or {}, d.get("drafter") or {}
    return ContextCosts(
        ref_tokens=float(d["ref_tokens"]),
        ref_audio_s=float(d["ref_audio_s"]),
        target_ms_per_token=float(t.get("ms_per_token", 0.0)),
        target_ms_per_audio_s=float(t.get("ms_per_audio_s", 0.0)),
        target_ms_per_token_per_width=float(t.get("ms_per_token_per_width", 0.0)),
        target_ms_per_audio_s_per_width=float(t.get("ms_per_audio_s_per_width", 0.0)),
        drafter_ms_per_token=float(dr.get("ms_per_token", 0.0)),
        drafter_ms_per_audio_s=float(dr.get("ms_per_audio_s", 0.0)),
    )


_IN_LOOP_FIX = "recalibrate with `as2d calibrate` (or drop the entry: an absent ratio is 1.0)"


def _check_in_loop(doc: dict, where: str) -> None:
    """``costs.in_loop``: known families and op kinds, finite ratios > 0 (one-line errors)."""
    c = doc.get("costs")
    if not isinstance(c, dict) or "in_loop" not in c:
        return
    d = c["in_loop"]
    if not isinstance(d, dict):
        raise FormatError(
            f"{where}: key costs.in_loop: expected a mapping of method family to {{op kind: ratio}}, "
            f"got {type(d).__name__}; {_IN_LOOP_FIX}"
        )
    for fam, kinds in d.items():
        allowed = IN_LOOP_KINDS.get(fam) if isinstance(fam, str) else None
        if allowed is None:
            raise FormatError(
                f"{where}: key costs.in_loop.{fam}: unknown method family {fam!r} "
                f"(known: {', '.join(sorted(IN_LOOP_KINDS))}); {_IN_LOOP_FIX}"
            )
        if not isinstance(kinds, dict):
            raise FormatError(
                f"{where}: key costs.in_loop.{fam}: expected a mapping of op kind to ratio, "
                f"got {type(kinds).__name__}; {_IN_LOOP_FIX}"
            )
        for kind, r in kinds.items():
            if kind not in allowed:
                raise FormatError(
                    f"{where}: key costs.in_loop.{fam}.{kind}: unknown op kind {kind!r} for family {fam!r} "
                    f"(allowed: {', '.join(allowed)}); {_IN_LOOP_FIX}"
                )
            if (
                isinstance(r, bool)
                or not isinstance(r, (int, float))
                or not math.isfinite(r)
                or r <= 0
            ):
                raise FormatError(
                    f"{where}: key costs.in_loop.{fam}.{kind}: ratio must be a finite number > 0, got {r!r}; "
                    f"{_IN_LOOP_FIX}"
                )


def _in_loop(d: dict | None) -> dict[str, dict[str, float]] | None:
    if d is None:
        return None
    return {
        fam: {k: float(r) for k, r in sorted(kinds.items())} for fam, kinds in sorted(d.items())
    }


def _check_finite(x: Any, key: str, where: str) -> None:
    """No cost may be NaN or infinite (YAML's ``.nan``/``.inf`` pass the schema's bounds):
    an impossible figure would only turn into an impossible result later."""
    if isinstance(x, dict):
        for k, v in x.items():
            _check_finite(v, f"{key}.{k}", where)
    elif isinstance(x, float) and not math.isfinite(x):
        raise FormatError(
            f"{where}: key {key}: {x} is not a finite number; fix the figure or recalibrate "
            f"with `as2d calibrate`"
        )


ALLOW_HINT = "pass --allow-implausible to use it anyway (the results record that you did)"


def check_plausible(p: CostProfile, *, allow_implausible: bool = False) -> CostProfile:
    """``p`` when it is physically plausible (:func:`~as2d_cli.formats.profile.implausibilities`);
    otherwise one FormatError naming the first field, or with ``allow_implausible`` ``p``
    with the problems in ``allowed_implausible`` (results carry them in their provenance)."""
    problems = implausibilities(p)
    if not problems:
        return p
    if allow_implausible:
        return dataclasses.replace(p, allowed_implausible=tuple(problems))
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    redo = "regenerate the profile" if p.synthetic else "recalibrate with `as2d calibrate`"
    fix = f"fix that figure or {redo}"
    raise FormatError(f"{p.path}: implausible profile: {problems[0]}{more}; {fix}, or {ALLOW_HINT}")


def load_profile(
    path: str | Path, *, check: bool = False, allow_implausible: bool = False
) -> CostProfile:
    """Read and validate a profile file. ``check``: a command about to price with it also
    refuses a physically implausible one (:func:`check_plausible`); ``allow_implausible``
    (implies ``check``) accepts it and records the problems in ``allowed_implausible``.
    Without either (re-rendering results, resuming) only the format is checked."""
    path = Path(path)
    p = profile_from_doc(read_yaml(path, "profile"), str(path))
    if check or allow_implausible:
        return check_plausible(p, allow_implausible=allow_implausible)
    return p


def profile_to_doc(p: CostProfile) -> dict:
    costs: dict[str, Any] = {
        "target_step_ms": p.target_step_ms,
        "loop_ms": p.loop_ms,
        "align_ms": p.align_ms,
        "verify": {
            "idle_ms": _kkeys(dict(p.verify_idle_ms)),
            "concurrent_ratio": _kkeys(dict(p.verify_concurrent_ratio)),
        },
        "drafter": None
        if p.drafter is None
        else {
            "step_ms": p.drafter.step_ms,
            "catch_up_ms": p.drafter.catch_up_ms,
            "paired_ms": p.drafter.paired_ms,
            "row_ms": p.drafter.row_ms,
            "refresh_ms": _kkeys(dict(p.drafter.refresh_ms)),
            **({"derived": p.drafter.derived} if p.drafter.derived else {}),
        },
        "sources": {},
    }
    for name, s in p.sources.items():
        sd: dict[str, Any] = {"kind": s.kind}
        if s.kind == "autoregressive":
            sd["step_ms"] = s.step_ms_idle
        else:
            sd["chunk_ms"] = s.chunk_ms_idle
        sd.update(
            publish_ms=s.publish_ms, startup_ms=s.startup_ms, concurrent_ratio=s.concurrent_ratio
        )
        if s.verify_concurrent_ratio:
            sd["verify_concurrent_ratio"] = _kkeys(dict(s.verify_concurrent_ratio))
        if s.startup_ms_per_audio_s:
            sd["startup_ms_per_audio_s"] = s.startup_ms_per_audio_s
        if s.derived:
            sd["derived"] = s.derived
        costs["sources"][name] = sd
    if p.context is not None:
        c = p.context
        costs["context"] = {
            "ref_tokens": c.ref_tokens,
            "ref_audio_s": c.ref_audio_s,
            "target": {
                "ms_per_token": c.target_ms_per_token,
                "ms_per_audio_s": c.target_ms_per_audio_s,
                "ms_per_token_per_width": c.target_ms_per_token_per_width,
                "ms_per_audio_s_per_width": c.target_ms_per_audio_s_per_width,
            },
            "drafter": {
                "ms_per_token": c.drafter_ms_per_token,
                "ms_per_audio_s": c.drafter_ms_per_audio_s,
            },
        }
    if p.in_loop is not None:
        costs["in_loop"] = {
            fam: dict(sorted(kinds.items())) for fam, kinds in sorted(p.in_loop.items())
        }
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "created": p.created,
        "synthetic": p.synthetic,
        "toolkit_version": __version__,
        "git_commit": git_commit(),
        "device": dict(p.device),
        "costs": costs,
        "fit": {
            "method": p.fit.method,
            "notes": p.fit.notes,
            "samples": {k: list(v) for k, v in p.fit.samples.items()},
        },
    }


_HEAD = """# as2d.profile v2 — device cost profile (all costs in ms; widths K = physical
# verification width, known root included; only measured widths exist).
# Field reference: docs/formats.md. Do not hand-edit figures: recalibrate instead.
"""


def dump_profile(p: CostProfile) -> str:
    doc = plain(profile_to_doc(p))
    return _HEAD + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def write_profile(path: str | Path, p: CostProfile, *, force: bool = False) -> Path:
    """Write atomically; refuses to overwrite unless ``force``. The text is re-read and
    validated before writing so an invalid profile never reaches disk."""
    text = dump_profile(p)
    profile_from_doc(yaml.safe_load(text), str(path))
    return write_atomic(path, text.encode("utf-8"), force=force)
