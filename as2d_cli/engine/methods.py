"""The one owner of the compared methods: their names, defaults, configurations and the
method → engine-policy mapping (paper 5.1, D.1.3, 5.3). Replay, the oracle sweep, selection,
evaluation and the native runner all build their policies from :class:`MethodSpec`; the
defaults are literals in :mod:`as2d_cli.engine.defaults` only (so the policies can use
them without importing this module) and every caller imports them from here.

* ``target-only``  — scalar target steps.
* ``sd``           — standard SD at fixed physical widths; summarised over K = 5..8
                     (mean of per-K pooled TPS; per window the mean of its four TPS).
* ``asp``          — SpecASR ASP with recycling: threshold 0.4, cap 24, or as far as the
                     profile's measured widths allow (the paper used 14 on phones
                     calibrated to K15).
* ``as2d``         — target-decoupled source with a fixed budget (default: the
                     deployment's, else 7) and confidence stop 0.4 where the source has
                     confidences.
* ``as2d-no-td``   — ablation: serial ASP-style drafting capped at As²d's budget.
* ``as2d-no-bc``   — ablation: target-decoupled drafting with ASP's threshold and cap.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from as2d_cli.engine.defaults import (  # noqa: F401  (re-exported: every caller imports them from here)
    ALIGN_MODES,
    DEFAULT_ALIGN,
    DEFAULT_ALIGN_LOOKBACK,
    DEFAULT_ALIGN_WINDOW,
    DEFAULT_ASP_CAP,
    DEFAULT_BATCH,
    DEFAULT_BUDGET,
    DEFAULT_SD_K,
    DEFAULT_SOURCE,
    DEFAULT_THRESHOLD,
    SD_WIDTHS,
)
from as2d_cli.engine.history import HISTORY  # noqa: F401  (re-exported with the methods)
from as2d_cli.engine.policies import (
    ASP,
    As2d,
    Policy,
    StandardSD,
    TargetOnly,
    without_bc,
    without_td,
)
from as2d_cli.errors import UserError

METHODS = ("target-only", "sd", "asp", "as2d", "as2d-no-td", "as2d-no-bc")


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One concrete configuration: a method plus its width/budget/source."""

    method: str
    k: int | None = None  # standard SD physical width
    budget: int | None = None  # As²d budget, ASP cap, w/o-TD budget, w/o-BC cap
    source: str | None = None  # decoupled methods: the requested source
    threshold: float | None = DEFAULT_THRESHOLD
    batch: int = DEFAULT_BATCH
    align_lookback: int = DEFAULT_ALIGN_LOOKBACK  # alignment rule 4 (docs/engine.md)
    align_window: int = DEFAULT_ALIGN_WINDOW
    align: str = DEFAULT_ALIGN  # "paper" reproduces C.3 (+ look-back); "suffix" (alignment.py)
    # As²d: history candidates (engine/history.py) fill rounds the source leaves empty;
    # the source "history" is that alone, with no producer.
    history: bool = False

    @property
    def decoupled(self) -> bool:
        return self.method in ("as2d", "as2d-no-bc")

    @property
    def serial(self) -> bool:
        return self.method in ("sd", "asp", "as2d-no-td")

    @property
    def label(self) -> str:
        if self.method == "sd":
            return f"sd-k{self.k}"
        if self.method == "target-only":
            return "target-only"
        src = f"{self.source}/" if self.decoupled and self.source else ""
        if self.method == "as2d" and self.history and self.source != HISTORY:
            src = f"{self.source}+{HISTORY}/"
        return f"{self.method}({src}b{self.budget})"

    def policy(self) -> Policy:
        m = self.method
        if m == "target-only":
            return TargetOnly()
        if m == "sd":
            assert self.k is not None
            return StandardSD(self.k)
        assert self.budget is not None
        if m == "asp":
            return ASP(
                threshold=self.threshold if self.threshold is not None else DEFAULT_THRESHOLD,
                cap=self.budget,
            )
        if m == "as2d":
            return As2d(
                budget=self.budget,
                threshold=self.threshold,
                batch=self.batch,
                window=self.align_window,
                lookback=self.align_lookback,
                align=self.align,
                history=self.history or self.source == HISTORY,
            )
        if m == "as2d-no-td":
            return without_td(
                self.budget,
                threshold=self.threshold if self.threshold is not None else DEFAULT_THRESHOLD,
            )
        if m == "as2d-no-bc":
            p = without_bc(
                threshold=self.threshold if self.threshold is not None else DEFAULT_THRESHOLD,
                cap=self.budget,
                align=self.align,
            )
            return As2d(
                budget=p.budget,
                threshold=p.threshold,
                batch=self.batch,
                window=p.window,
                lookback=self.align_lookback,
                align=p.align,
                name=p.name,
            )
        raise UserError(f"unknown method {m!r}; choose one of {', '.join(METHODS)}")

    @property
    def max_width(self) -> int:
        if self.method == "target-only":
            return 1
        if self.method == "sd":
            assert self.k is not None
            return self.k
        assert self.budget is not None
        return self.budget + 1

    def to_wire(self) -> dict[str, Any]:
        """The one wire form (docs/runner-protocol.md, "Method settings"): every field under
        its one name; a field the method does not take is null."""
        takes = WIRE_TAKES[self.method]
        return {
            "method": self.method,
            **{f: getattr(self, f) if f in takes else None for f in WIRE_FIELDS[1:]},
        }

    @classmethod
    def from_wire(cls, doc: Mapping[str, Any]) -> MethodSpec:
        """The spec a wire object names: only the method's own fields are read (the others
        may hold anything: a result or command carries more); an absent one takes the
        method's default, a bad one is one UserError naming the field."""
        method = doc.get("method")
        if method not in WIRE_TAKES:
            raise UserError(f"field 'method' must be one of {', '.join(METHODS)}, got {method!r}")
        values = {f: _wire_value(doc, f, method) for f in WIRE_TAKES[method]}
        return cls(method, **values)


# The wire form: one name per MethodSpec field, in this order, and the fields each method
# reads (the rest travel as null). w/o BC keeps ASP's alignment window (policies.without_bc).
WIRE_FIELDS = (
    "method",
    "k",
    "budget",
    "source",
    "threshold",
    "batch",
    "align",
    "align_window",
    "align_lookback",
    "history",
)
_SERIAL_FIELDS = ("budget", "threshold")
_DECOUPLED_FIELDS = (*_SERIAL_FIELDS, "source", "batch", "align", "align_lookback")
WIRE_TAKES: dict[str, tuple[str, ...]] = {
    "target-only": (),
    "sd": ("k",),
    "asp": _SERIAL_FIELDS,
    "as2d-no-td": _SERIAL_FIELDS,
    "as2d-no-bc": _DECOUPLED_FIELDS,
    "as2d": (*_DECOUPLED_FIELDS, "align_window", "history"),
}
# The lowest value of each integer field ("budget" is ASP's and w/o BC's cap too).
_WIRE_MINIMA = {"k": 1, "budget": 1, "batch": 1, "align_window": 0, "align_lookback": 0}


def wire_default(field: str, method: str) -> Any:
    """A wire field's value when a command leaves it out."""
    if field == "budget":
        return DEFAULT_ASP_CAP if method in ("asp", "as2d-no-bc") else DEFAULT_BUDGET
    defaults = {
        "k": DEFAULT_SD_K,
        "source": DEFAULT_SOURCE,
        "threshold": DEFAULT_THRESHOLD,
        "batch": DEFAULT_BATCH,
        "align": DEFAULT_ALIGN,
        "align_window": DEFAULT_ALIGN_WINDOW,
        "align_lookback": DEFAULT_ALIGN_LOOKBACK,
        "history": False,
    }
    return defaults[field]


def _wire_value(doc: Mapping[str, Any], field: str, method: str) -> Any:
    v = doc[field] if field in doc else wire_default(field, method)
    if field == "threshold":  # null: no confidence stop
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise UserError(f"field 'threshold' must be a number or null, got {v!r}")
        return None if v is None else float(v)
    if field == "history":
        if not isinstance(v, bool):
            raise UserError(f"field 'history' must be true or false, got {v!r}")
        return v
    if field in ("source", "align"):
        choices = ALIGN_MODES if field == "align" else None
        if not isinstance(v, str) or (choices is not None and v not in choices):
            want = f"one of {', '.join(choices)}" if choices else "a source name"
            raise UserError(f"field {field!r} must be {want}, got {v!r}")
        return v
    lo = _WIRE_MINIMA[field]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise UserError(f"field {field!r} must be an integer >= {lo}, got {v!r}")
    return v


def spec_of(method: str, **given: Any) -> MethodSpec:
    """The spec a command's method options name, by their wire names (None: not given —
    the method's default); options the method does not take are not read."""
    return MethodSpec.from_wire(
        {"method": method, **{k: v for k, v in given.items() if v is not None}}
    )


def spec_grid(base: MethodSpec, lists: Mapping[str, Sequence[Any]]) -> list[MethodSpec]:
    """``base`` under every combination of the listed settings (llama-bench's way: every
    setting a list, their product swept), the first setting outermost; a value listed twice
    counts once. ``lists`` maps MethodSpec field names to their values; an empty list keeps
    ``base``'s value."""
    names = list(lists)
    axes = [list(dict.fromkeys(lists[n])) or [getattr(base, n)] for n in names]
    return [
        dataclasses.replace(base, **dict(zip(names, combo))) for combo in itertools.product(*axes)
    ]


# Each method option: what it sets and the methods that have it. An option given for any
# other method is refused (check_method_options), never silently ignored: `--budget 12`
# with SD would otherwise report SD's K=5..8 as if a budget had been tried.
DECOUPLED = ("as2d", "as2d-no-bc")
METHOD_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "--k": ("standard SD's physical width", ("sd",)),
    "--budget": (
        "the proposal budget (As²d, w/o TD) or cap (ASP, w/o BC)",
        ("asp", "as2d", "as2d-no-td", "as2d-no-bc"),
    ),
    # ASP and the ablations keep SpecASR's confidence stop (DEFAULT_THRESHOLD, paper 5.1).
    "--threshold": ("As²d's own confidence stop", ("as2d",)),
    "--batch": ("the target-decoupled source's publication batch", DECOUPLED),
    "--source": ("the target-decoupled source", DECOUPLED),
    "--align": ("the target-decoupled alignment rules", DECOUPLED),
    "--candidates": ("external candidate batches for a target-decoupled source", DECOUPLED),
    "--history": ("history candidates beside As²d's source (engine/history.py)", ("as2d",)),
}
# A note for (option given, method): the option a user most likely meant instead (shown
# when the command has it), or None and what the method does instead.
_NOTES: dict[tuple[str, str], tuple[str | None, str]] = {
    ("--budget", "sd"): ("--k", "SD's width is --k"),
    ("--k", "asp"): ("--budget", "ASP's cap is --budget"),
    ("--threshold", "asp"): (None, f"ASP keeps SpecASR's fixed {DEFAULT_THRESHOLD}"),
    ("--threshold", "as2d-no-bc"): (None, f"it keeps ASP's fixed {DEFAULT_THRESHOLD}"),
    ("--threshold", "as2d-no-td"): (None, f"it keeps ASP's fixed {DEFAULT_THRESHOLD}"),
}


def check_method(method: str, methods: tuple[str, ...] = METHODS) -> None:
    """``method`` is one of ``methods``; a near miss is named (``as2D`` → as2d)."""
    if method in methods:
        return
    import difflib

    near = difflib.get_close_matches(method.lower(), methods, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise UserError(f"unknown --method {method!r}{hint}; choose one of {', '.join(methods)}")


def check_method_options(
    method: str,
    *,
    methods: tuple[str, ...] = METHODS,
    offers: tuple[str, ...] = tuple(METHOD_OPTIONS),
    **given: object,
) -> None:
    """The one check every command runs on its method options, given by name without the
    dashes (``k=``, ``budget=``, ``threshold=``, ``batch=``, ``source=``, ``align=``,
    ``candidates=``, ``history=``; None, or a false ``history``: not given): an option the
    method does not have is refused in one line naming it and the methods that take it
    (:data:`METHOD_OPTIONS`). ``methods``/``offers``: the methods and options the command
    has, so the advice names only those. Values are range-checked where parsed."""
    check_method(method, methods)
    unknown = sorted(set(given) - {o.removeprefix("--") for o in METHOD_OPTIONS})
    if unknown:
        raise TypeError(f"check_method_options() got unexpected options {unknown}")
    for option in METHOD_OPTIONS:
        value = given.get(option.removeprefix("--"))
        if option == "--history":
            value = value or None
        what, takers = METHOD_OPTIONS[option]
        if value is None or method in takers:
            continue
        needs, note = _NOTES.get((option, method), ("", ""))
        hint = f" ({note})" if note and (needs is None or needs in offers) else ""
        usable = [m for m in takers if m in methods]
        use = " or ".join([", ".join(usable[:-1]), usable[-1]] if len(usable) > 1 else usable)
        raise UserError(
            f"{option} sets {what}; method {method} has none{hint} — drop {option}"
            + (f" or use --method {use}" if use else "")
        )


def asp_cap(max_width: int) -> int:
    """ASP's cap: 24 proposals (K25) or the largest the profile's widths allow (D.2.3)."""
    return max(1, min(DEFAULT_ASP_CAP, max_width - 1))


@dataclass(frozen=True)
class MethodOptions:
    """A method's settings as a replay is given them (None: the method's own default).
    ``default_source``/``default_budget``: what As²d falls back to (the trace's default
    source, a deployment's budget); ``threshold``/``batch`` configure As²d's confidence stop
    and publication batch (a deployment's values); ``align`` sets both target-decoupled
    methods' alignment rules; ``history`` merges history candidates into As²d's source (a
    deployment's choice; w/o BC, the paper's ablation, never takes them)."""

    budget: int | None = None
    source: str | None = None
    k: int | None = None
    default_source: str | None = None
    default_budget: int = DEFAULT_BUDGET
    batch: int = DEFAULT_BATCH
    threshold: float | None = DEFAULT_THRESHOLD
    align: str = DEFAULT_ALIGN
    history: bool = False


def expand(
    method: str, profile_max_width: int, options: MethodOptions = MethodOptions()
) -> list[MethodSpec]:
    """The configurations one method name stands for (SD: one per K in 5..8 unless ``k``);
    the ablations keep ASP's threshold."""
    o = options
    budget, source, k, batch, align = o.budget, o.source, o.k, o.batch, o.align
    check_method_options(method, budget=budget, k=k, source=source)
    for name, v in (("--budget", budget), ("--k", k)):
        if v is not None and v < 1:
            raise UserError(f"{name} must be at least 1, got {v}")
    if align not in ALIGN_MODES:
        raise UserError(f"--align {align!r}: choose one of {', '.join(ALIGN_MODES)}")
    if method == "target-only":
        return [MethodSpec("target-only")]
    if method == "sd":
        widths = (k,) if k is not None else SD_WIDTHS
        return [MethodSpec("sd", k=w) for w in widths]
    if method == "asp":
        return [
            MethodSpec("asp", budget=budget if budget is not None else asp_cap(profile_max_width))
        ]
    if method == "as2d-no-td":
        return [MethodSpec("as2d-no-td", budget=budget if budget is not None else o.default_budget)]
    src = source or o.default_source
    if src is None:
        raise UserError(
            "the trace declares no default source; pass --source with one of its sources"
        )
    if method == "as2d-no-bc":
        b = budget if budget is not None else asp_cap(profile_max_width)
        return [MethodSpec("as2d-no-bc", budget=b, source=src, batch=batch, align=align)]
    return [
        MethodSpec(
            "as2d",
            budget=budget if budget is not None else o.default_budget,
            source=src,
            batch=batch,
            threshold=o.threshold,
            align=align,
            history=o.history,
        )
    ]
