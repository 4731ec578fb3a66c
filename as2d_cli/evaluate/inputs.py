"""Find the inputs of an evaluation for ``--phone``: profile, traces, deployment.

* Profile: ``--profile``, else the newest profile *measured* on the phone
  (``calibrations/*.profile.yaml`` whose device name, serial or connection is the phone;
  ``as2d calibrate`` writes those), else a synthetic one for it
  (``calibrations/<phone>.profile.yaml``, then the toolkit's shipped
  ``as2d_cli/assets/profiles/<phone>.profile.yaml``; for another model pair than the bundled
  one, ``<phone>.<pair>.profile.yaml`` in the same places, recorded for that pair).
* Traces: ``--traces`` (one file or a folder of ``*.jsonl[.gz]``), else the traces that ship
  with the toolkit (``as2d_cli/assets/traces``).
* Deployment: ``--deployment``, else the newest ``calibrations/<device>/deployment*.yaml``
  (or one shipped beside a shipped profile) chosen on this very profile (same sha256);
  else none (the caller runs the selection).
  A deployment is *confirmed* when its selection was checked on the val split (its
  ``selection.retained`` is true or false); one selected on dev only is *unconfirmed*.
  A deployment *passes its checks* when val retained it and it was selected on at least
  :data:`MIN_DEV_WINDOWS` dev windows; one that does not is used only when the caller
  accepts it (``as2d eval --accept-unvalidated``, or its older name ``--allow-unconfirmed``),
  and the results record why (:func:`validation_failures`).
* Native runs: a profile measured on another device, or a synthetic one, prices what this
  device does only with an error expected from the start (:func:`profile_mismatch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.errors import UserError
from as2d_cli.formats.common import sha256_file
from as2d_cli.formats.deployment import UNRECORDED_ALIGN
from as2d_cli.formats.pairs import check_pair as check_pair
from as2d_cli.formats.pairs import describe_pair as describe_pair
from as2d_cli.formats.pairs import same_pair
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import TraceSet

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

ASSET_TRACES = Path(__file__).resolve().parents[1] / "assets" / "traces"


def pair_traces(pair: ModelPair) -> Path:
    """Where a model pair's traces live: ``PAIR/traces`` for its default task, and
    ``PAIR/traces/<task>`` for another (one pair, per-task traces and tables)."""
    task = pair.prompt.task
    base = pair.directory / "traces"
    return base if task is None or task == pair.default_task() else base / task


SHIPPED_PROFILES = Path(__file__).resolve().parents[1] / "assets" / "profiles"


def find_profile(
    phone: str, calibrations: Path, pair: dict | None = None, models: Path | None = None
) -> Path:
    """The profile for ``phone`` and the model pair ``pair`` (its identity, None: the bundled
    pair): the newest measured on it, else a synthetic one. ``<phone>.profile.yaml`` prices
    the bundled pair only; another pair takes ``<phone>.<pair name>.profile.yaml`` recorded for
    that very pair (the shipped audio-LLM pair's K70 profile), else needs a profile measured
    with it (``as2d calibrate --models``).

    ``phone`` is a name, a hardware serial or an adb serial. An adb serial attached now is
    the phone behind it: its profiles are those recorded with its hardware serial, whatever
    adb serial it had when it was calibrated (a wireless phone gets a new one with every
    connection), and never a profile of another phone that once had that adb serial."""
    import yaml

    from device_agents.identity import attached_identity
    from device_agents.phones import canonical

    names = {phone, canonical(phone) or phone}
    # Only a value that may be an adb serial is looked up; names and `local` need no server.
    ident = attached_identity(phone) if phone != "local" and canonical(phone) is None else None
    measured = []
    # A farm calibration writes each phone's files in its own folder (<name>-<serial>/).
    found = [*calibrations.glob("*.profile.yaml"), *calibrations.glob("*/*.profile.yaml")]
    for p in sorted(found) if calibrations.is_dir() else []:
        try:
            doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
            dev = doc.get("device", {}) or {}
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if doc.get("synthetic"):
            continue
        if ident is not None:
            if dev.get("serial") != ident.serial:
                continue
        elif not names & {dev.get("name"), dev.get("serial"), dev.get("connection")}:
            continue
        if same_pair(dev.get("pair"), pair):
            measured.append((str(doc.get("created") or ""), p.stat().st_mtime, p))
    if measured:
        return max(measured)[2]
    key = canonical(phone) or phone
    synthetic, stale = _synthetic_profile(key, calibrations, pair)
    if synthetic is not None:
        return synthetic
    flag = f" --models {models}" if models is not None else ""
    which = f" measured with model pair {pair['name']!r}" if pair is not None else ""
    from device_agents.phones import did_you_mean

    who = phone + did_you_mean(phone) if ident is None else f"{phone} ({ident.describe()})"
    other = (
        f" ({stale} prices another version of that pair: regenerate it with "
        f"`python training/make_k70_profile.py --pair PAIR`)"
        if stale is not None
        else ""
    )
    raise UserError(
        f"no cost profile for --phone {who}{which} in {calibrations}/{other}: run "
        f"`as2d calibrate --phone {phone}{flag}` first, or pass --profile FILE"
    )


def _synthetic_profile(
    key: str, calibrations: Path, pair: dict | None
) -> tuple[Path | None, Path | None]:
    """A synthetic profile for phone ``key`` and the model ``pair`` (its identity; None: the
    bundled pair): ``calibrations/<key>.profile.yaml``, then the shipped one, for the bundled
    pair; ``<key>.<pair name>.profile.yaml`` in the same two places for another pair, taken
    only when its ``device.pair`` is that very pair. Returns (the profile, None), or (None, a
    profile of that name recorded for another version of the pair, if any)."""
    import yaml

    from as2d_cli.formats.layout import pair_profile_name

    name = f"{key}.profile.yaml" if pair is None else pair_profile_name(key, str(pair["name"]))
    stale = None
    for path in (calibrations / name, SHIPPED_PROFILES / name):
        if not path.is_file():
            continue
        if pair is None:
            return path, None
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            recorded = (doc.get("device") or {}).get("pair")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if same_pair(recorded, pair):
            return path, None
        stale = stale or path
    return None, stale


def deployment_candidates(
    profile_path: Path,
    device: str,
    calibrations: Path,
    traces: list[Path] | None = None,
    align: str | None = None,
) -> list[tuple[Path, dict]]:
    """The device's deployments chosen on this profile — and, when ``traces`` are given,
    on these very trace files (a deployment selected on other traces is stale: regenerated
    traces get a fresh selection rather than an old choice), and when ``align`` is given,
    under those alignment rules (a version-1 file: ``paper``) — newest first, with each
    file's ``selection``."""
    digest = sha256_file(profile_path)
    have = {sha256_file(t) for t in traces} if traces else None
    import yaml

    cands = []
    folders = [calibrations / device]
    if profile_path.resolve().parent == SHIPPED_PROFILES:  # a shipped profile's own deployments too
        folders.append(SHIPPED_PROFILES / device)
    found = [p for d in folders if d.is_dir() for p in sorted(d.glob("deployment*.yaml"))]
    for p in found:
        try:
            doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict) or (doc.get("profile") or {}).get("sha256") != digest:
            continue
        config = doc.get("config")
        if not isinstance(config, dict):
            config = {}
        if align is not None and config.get("align", UNRECORDED_ALIGN) != align:
            continue
        selection = doc.get("selection")
        if not isinstance(selection, dict):
            selection = {}
        used = {t.get("sha256") for t in (selection.get("traces") or []) if isinstance(t, dict)}
        if have is not None and used and not used <= have:
            continue
        cands.append((p, selection))
    return sorted(cands, key=lambda c: (c[0].stat().st_mtime, c[0].name), reverse=True)


def validation(selection: Mapping[str, Any] | None) -> bool | None:
    """Whether the val split retained the selection (True / False), or None when it was
    never checked there (selected on dev only: unconfirmed)."""
    selection = selection or {}
    retained = selection.get("retained")
    if retained is None and isinstance(selection.get("val"), dict):
        retained = selection["val"].get("retained")
    return retained if isinstance(retained, bool) else None


def describe_deployment(
    path: Path, source: str, budget: int, selection: Mapping[str, Any] | None
) -> str:
    """One line: which deployment file, its configuration and what val said of it."""
    state = {
        True: "checked on val: retained",
        False: "checked on val: NOT retained (the val best beat it by more than the tolerance)",
        None: "UNCONFIRMED: selected on dev only, never checked on val",
    }[validation(selection)]
    return f"deployment {path}: {source}/budget {budget}; {state}"


# The fewest dev windows a selection is trusted on. On the bundled traces and the K70
# profile, selections made on 20 dev windows drawn at random (2,000 draws each, three
# settings: 0.4/8 under the suffix and the paper's rules, and the shipped 0.7/2) were
# retained on the 100 val windows in at least 99.9 % of draws, the worst within 1.1 % of
# the val best; on 10 windows 0.5-2 % of them failed retention and the worst lost 2 %
# (docs/evaluation.md). The shipped deployments were selected on 50.
MIN_DEV_WINDOWS = 20

ACCEPT_FLAG = "--accept-unvalidated"


def dev_windows(selection: Mapping[str, Any] | None) -> int | None:
    """How many dev windows the selection ranked its catalog on (None: not recorded)."""
    dev = (selection or {}).get("dev")
    n = dev.get("windows") if isinstance(dev, Mapping) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def validation_failures(selection: Mapping[str, Any] | None) -> list[str]:
    """What the deployment's own checks said against it, each a phrase that reads after
    "it was": never checked on val, NOT retained there, selected on fewer than
    :data:`MIN_DEV_WINDOWS` dev windows. Empty: it passed them."""
    selection = selection or {}
    out = []
    retained = validation(selection)
    if retained is None:
        out.append("selected on dev only and never checked on val")
    elif retained is False:
        val = selection.get("val")
        val = val if isinstance(val, Mapping) else {}
        detail = []
        if isinstance(val.get("rank"), int):
            detail.append(f"val rank {val['rank']}")
        if isinstance(val.get("retention"), (int, float)):
            detail.append(f"{100 * val['retention']:.1f} % of the val best's TPS")
        if isinstance(val.get("tolerance"), (int, float)):
            detail.append(f"tolerance {100 * val['tolerance']:g} %")
        out.append("NOT retained on validation" + (f" ({', '.join(detail)})" if detail else ""))
    n = dev_windows(selection)
    if n is None:
        out.append(
            f"selected on an unrecorded number of dev windows (the minimum is {MIN_DEV_WINDOWS})"
        )
    elif n < MIN_DEV_WINDOWS:
        out.append(f"selected on {n} dev windows, fewer than the minimum of {MIN_DEV_WINDOWS}")
    return out


def require_validated(
    path: Path,
    selection: Mapping[str, Any] | None,
    *,
    given: bool,
    candidates: Sequence[tuple[Path, dict]] = (),
    accept: bool = False,
) -> list[str]:
    """The deployment's :func:`validation_failures`; when there are any and ``accept`` is
    false, refuse in one line saying what to do. ``given``: the user named it
    (``--deployment``) rather than it being found among ``candidates``."""
    failures = validation_failures(selection)
    if not failures or accept:
        return failures
    how = (
        "--deployment" if given else "the newest deployment chosen on this profile and these traces"
    )
    passing = next((p for p, sel in candidates if not validation_failures(sel)), None)
    other = (
        f", --deployment {passing} (it passes its checks)"
        if passing is not None and not given
        else ""
    )
    if validation(selection) is None:
        redo = "select again on traces with val windows (`as2d select-budget --traces DEV --traces VAL`)"
    else:
        redo = (
            f"select again on at least {MIN_DEV_WINDOWS} dev windows and val windows "
            "(`as2d select-budget --traces DEV --traces VAL`)"
        )
    raise UserError(
        f"{path} ({how}) was {' and '.join(failures)}; pass {ACCEPT_FLAG} (or "
        f"--allow-unconfirmed) to use it anyway{other}, or {redo}"
    )


def profile_mismatch(profile: CostProfile, identity: Any) -> str | None:
    """None when ``profile`` was measured on the device ``identity`` names (a
    device_agents ``DeviceIdentity``); else why its replay of that device's native runs has
    an error expected from the start: it is synthetic, or another device's. A profile's
    device is this one when its hardware serial is this device's; a profile recording no
    serial, when its name (and model, where both record one) are."""
    dev = profile.device or {}
    if profile.synthetic:
        return "synthetic profile: published costs, measured on no device"
    serial = dev.get("serial")
    name = dev.get("name")
    model = dev.get("model_id") or dev.get("model")
    if serial:
        same = str(serial) == str(identity.serial)
    else:
        same = name == identity.name and (
            not model or not identity.model_id or str(model) == str(identity.model_id)
        )
    if same:
        return None
    who = [str(name or "unnamed")]
    if model:
        who.append(f"model {model}")
    if serial:
        who.append(f"serial {serial}")
    return f"profile of another device ({', '.join(who)}), not {identity.describe()}"


def trace_files(traces: Path | None) -> list[Path]:
    root = traces if traces is not None else ASSET_TRACES
    if root.is_file():
        return [root]
    files = (
        sorted(
            f
            for f in [*root.glob("*.jsonl"), *root.glob("*.jsonl.gz")]
            # a build's resumable partial (traces build) is not a trace file until it is done
            if not f.name.endswith(".partial.jsonl") and not f.name.startswith(".")
        )
        if root.is_dir()
        else []
    )
    if not files:
        where = f"{root}" if traces is not None else "the toolkit's bundled traces"
        raise UserError(
            f"no trace files in {where}: pass --traces FILE, or build them with `as2d traces build`"
        )
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
            raise UserError(
                f"{f} was built with another model pair than {files[0]}; traces of one evaluation must "
                "come from the same models"
            )
        if ts.eos_id != first.eos_id or set(ts.sources) != set(first.sources):
            raise UserError(
                f"{f}: its EOS id or sources differ from {files[0]}; traces of one evaluation must come "
                "from the same models"
            )
        for w in ts.windows:
            if w.id in seen:
                raise UserError(f"{f}: window {w.id} appears in more than one trace file")
            seen.add(w.id)
            windows.append(w)
    return replace(first, windows=tuple(windows))
