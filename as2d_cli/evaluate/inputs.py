"""Find the inputs of an evaluation for ``--phone``: profile, traces, deployment.

* Profile: ``--profile``, else ``calibrations/<phone>.profile.yaml`` (shipped for the
  paper's phones), else the newest ``calibrations/*.profile.yaml`` whose device name or
  serial is the phone (``as2d calibrate`` writes those).
* Traces: ``--traces`` (one file or a folder of ``*.jsonl[.gz]``), else the traces that ship
  with the toolkit (``as2d_cli/assets/traces``).
* Deployment: ``--deployment``, else the newest ``calibrations/<device>/deployment*.yaml``
  chosen on this very profile (same sha256); else none (the caller runs the selection).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from as2d_cli.errors import UserError
from as2d_cli.formats.common import sha256_file
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import TraceSet

ASSET_TRACES = Path(__file__).resolve().parents[1] / "assets" / "traces"


def find_profile(phone: str, calibrations: Path, pair: dict | None = None, models: Path | None = None) -> Path:
    """The profile for ``phone`` and the model pair ``pair`` (its identity, None: the bundled
    pair). A shipped profile prices the bundled pair only; an imported pair needs a profile
    measured with it (``as2d calibrate --models``)."""
    shipped = calibrations / f"{phone}.profile.yaml"
    if shipped.is_file() and pair is None:
        return shipped
    import yaml

    found = []
    for p in sorted(calibrations.glob("*.profile.yaml")):
        try:
            dev = (yaml.safe_load(p.read_text(encoding="utf-8")) or {}).get("device", {})
        except (OSError, yaml.YAMLError):
            continue
        if phone in (dev.get("name"), dev.get("serial")) and same_pair(dev.get("pair"), pair):
            found.append(p)
    if not found:
        flag = f" --models {models}" if models is not None else ""
        which = f" measured with model pair {pair['name']!r}" if pair is not None else ""
        raise UserError(f"no cost profile for --phone {phone}{which} in {calibrations}/: run "
                        f"`as2d calibrate --phone {phone}{flag}` first, or pass --profile FILE")
    return max(found, key=lambda p: p.stat().st_mtime)


def same_pair(a: dict | None, b: dict | None) -> bool:
    """Whether two recorded pair identities name the same pair (None: the bundled pair)."""
    def key(x: dict | None) -> str | None:
        return None if x is None or x.get("name") == "bundled" else x.get("sha256")

    return key(a) == key(b)


def check_pair(profile: CostProfile, traces: TraceSet, where: str, pair: dict | None = None,
               pair_given: bool = False) -> None:
    """Refuse traces built with one model pair against a profile measured with another
    (or against the pair the command was given), in one line naming both."""
    tp = traces.provenance.get("pair")
    pp = profile.device.get("pair")
    name = lambda x: "the bundled pair" if x is None or x.get("name") == "bundled" else f"pair {x.get('name')!r}"  # noqa: E731
    if pair_given and not same_pair(tp, pair):
        raise UserError(f"{where} was built with {name(tp)}, not {name(pair)}; build traces for it with "
                        "`as2d traces build --models PAIR`")
    if not same_pair(tp, pp):
        raise UserError(f"{where} was built with {name(tp)} but the profile was measured with {name(pp)}; "
                        "use traces and a profile of the same model pair")


def find_deployment(profile_path: Path, device: str, calibrations: Path,
                    traces: list[Path] | None = None) -> Path | None:
    """The device's newest deployment chosen on this profile — and, when ``traces`` are
    given, on these very trace files (a deployment selected on other traces is stale:
    regenerated traces get a fresh selection rather than an old choice)."""
    digest = sha256_file(profile_path)
    have = {sha256_file(t) for t in traces} if traces else None
    import yaml

    cands = []
    for p in sorted((calibrations / device).glob("deployment*.yaml")) if (calibrations / device).is_dir() else []:
        try:
            doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if (doc.get("profile") or {}).get("sha256") != digest:
            continue
        used = {t.get("sha256") for t in ((doc.get("selection") or {}).get("traces") or []) if isinstance(t, dict)}
        if have is not None and used and not used <= have:
            continue
        cands.append(p)
    return max(cands, key=lambda p: (p.stat().st_mtime, p.name)) if cands else None


def trace_files(traces: Path | None) -> list[Path]:
    root = traces if traces is not None else ASSET_TRACES
    if root.is_file():
        return [root]
    files = sorted([*root.glob("*.jsonl"), *root.glob("*.jsonl.gz")]) if root.is_dir() else []
    if not files:
        where = f"{root}" if traces is not None else "the toolkit's bundled traces"
        raise UserError(f"no trace files in {where}: pass --traces FILE, or build them with `as2d traces build`")
    return files


def load_trace_files(files: list[Path]) -> TraceSet:
    """Load one or more trace files (e.g. one per split) as one set; they must agree."""
    from as2d_cli.formats.trace_io import load_traces

    sets = [load_traces(f) for f in files]
    first = sets[0]
    seen: set[str] = set()
    windows = []
    for f, ts in zip(files, sets):
        if not same_pair(ts.provenance.get("pair"), first.provenance.get("pair")):
            raise UserError(f"{f} was built with another model pair than {files[0]}; traces of one evaluation must "
                            "come from the same models")
        if ts.eos_id != first.eos_id or set(ts.sources) != set(first.sources):
            raise UserError(f"{f}: its EOS id or sources differ from {files[0]}; traces of one evaluation must come "
                            "from the same models")
        for w in ts.windows:
            if w.id in seen:
                raise UserError(f"{f}: window {w.id} appears in more than one trace file")
            seen.add(w.id)
            windows.append(w)
    return replace(first, windows=tuple(windows))
