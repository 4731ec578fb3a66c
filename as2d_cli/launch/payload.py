"""How the host starts the native runner on a device (docs/runner-protocol.md, "Running on
a device").

Two launch strategies, chosen per device:

* ``bundle`` -- an arm64 phone without Python: the arm64 bundle (`as2d bundle build`),
  which brings its own interpreter, libraries, runner code and models.
* ``python`` -- a device whose ``python3`` already has the runner's libraries (numpy,
  onnxruntime, tokenizers, soundfile), such as the emulated phone (its ``python3`` is this
  host's interpreter) or a phone with a Python installation: a *payload* in two parts --
  the project's runner code (``app-<hash>``, ~0.2 MB) and the models (``models-<hash>``,
  ~50 MB) -- is pushed into ``/data/local/tmp/as2d-runtime/``, each part only when the
  phone does not hold its hash already, and the runner is started there with
  ``PYTHONPATH`` pointing only at that copy and the ``load`` command reading the models
  from it.

Either way the corpus windows a batch needs (only those) are pushed into the batch's
per-run directory and named by ``AS2D_CORPUS``; the per-run directory goes afterwards.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import shlex
import tarfile
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli import __version__
from as2d_cli.bundle.recipe import excluded, shipped_files
from as2d_cli.errors import DeviceError, UserError
from as2d_cli.formats import registry
from as2d_cli.formats.common import sha256_file

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

PAYLOAD_SCHEMA, PAYLOAD_VERSION = registry.name_version("as2d.payload")
RUNTIME_AREA = "as2d-runtime"
MARKER = "payload.sha256"  # written only after a complete unpack: proves a whole payload
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The runner's code: what ships to a phone (the bundle recipe's one list), its assets
# apart — the models travel as the payload's second part.
ASSETS = "as2d_cli/assets"
RUNTIMES = ("auto", "python", "bundle")
RUNTIME_ENV = "AS2D_PHONE_RUNTIME"
FIXED_MTIME = 1577836800  # reproducible archives: same files, same bytes
# One round trip: does the device's python3 have what the runner imports?
PROBE = (
    "python3 -c 'import sys, numpy, onnxruntime, tokenizers, soundfile; "
    'print("as2d-python", sys.version_info[0], sys.version_info[1])\''
)


# ---------------------------------------------------------------------------- launchers
class Launcher(ABC):
    """Starts ``python ARGS`` on a device from a per-run directory."""

    name: str
    models: str | None  # the ``load`` command's ``models`` value on the device (None: bundled)

    @abstractmethod
    def command(self, args: Sequence[str], run_dir: str, env: Mapping[str, str]) -> str:
        """One shell line that starts the runner with ``env`` set."""

    @abstractmethod
    def describe(self) -> str:
        """One line for logs: what runs where."""


def _exports(env: Mapping[str, str]) -> str:
    return (
        "export " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items()))
        if env
        else "true"
    )


@dataclass(frozen=True)
class PythonPayloadLauncher(Launcher):
    """The runner payload on the device (code and models unpacked under ``area``), started
    with the device's python3 from ``area``."""

    serial: str
    area: str
    app: str  # <area>/app-<hash>: holds app/as2d_cli, app/native
    models_dir: str  # <area>/models-<hash>: holds models/
    pushed: tuple[str, ...]  # the parts pushed this time ("app", "models"); () when all were there
    push_seconds: float
    name: str = "python"

    @property
    def models(self) -> str:  # type: ignore[override]
        # Relative to the runner's working directory (the area): a phone path would not
        # name the same file for a host process standing in for the phone's Python.
        return posixpath.join(posixpath.relpath(self.models_dir, self.area), "models")

    def command(self, args: Sequence[str], run_dir: str, env: Mapping[str, str]) -> str:
        full = {
            "PYTHONPATH": posixpath.join(self.app, "app"),
            "HOME": run_dir,
            "TMPDIR": run_dir,
            "PYTHONNOUSERSITE": "1",
            **env,
        }
        return (
            f"cd {shlex.quote(self.area)} && {_exports(full)} && python3 {shlex.join(list(args))}"
        )

    def describe(self) -> str:
        how = (
            f"pushed {' and '.join(self.pushed)} in {self.push_seconds:.1f} s"
            if self.pushed
            else "already there"
        )
        return f"{self.serial}: python3 on the runner payload in {self.area} ({how})"


@dataclass(frozen=True)
class BundleLauncher(Launcher):
    """The arm64 bundle (as2d_cli.bundle.deploy.DeployedBundle) on the device."""

    deployed: Any
    name: str = "bundle"
    models: str | None = None  # the bundle carries the models

    def command(self, args: Sequence[str], run_dir: str, env: Mapping[str, str]) -> str:
        return f"{_exports(env)} && {self.deployed.command(list(args), run_dir)}"

    def describe(self) -> str:
        how = (
            f"pushed in {self.deployed.push_seconds:.1f} s"
            if self.deployed.pushed
            else "already there"
        )
        return f"{self.deployed.serial}: arm64 bundle {self.deployed.path} ({how})"


def choose_launcher(
    device: Any, pair: ModelPair | None = None, runtime: str | None = None
) -> Launcher:
    """The launch strategy for ``device``, carrying the model ``pair`` (None: the bundled
    one): ``runtime`` (or $AS2D_PHONE_RUNTIME) ``python``, ``bundle`` or ``auto`` (python when
    the device's python3 can run the runner, else the bundle)."""
    runtime = runtime or os.environ.get(RUNTIME_ENV) or "auto"
    if runtime not in RUNTIMES:
        raise UserError(
            f"{RUNTIME_ENV}={runtime!r} is not a runtime; use one of {', '.join(RUNTIMES)}"
        )
    if runtime in ("auto", "python"):
        usable, why = probe_python(device)
        if usable:
            return deploy_payload(device, *build_payload(pair))
        if runtime == "python":
            raise DeviceError(
                f"{device.serial}: no usable python3 on the device ({why}); "
                f"unset {RUNTIME_ENV} to use the arm64 bundle"
            )
    from as2d_cli.bundle.deploy import ensure_deployed

    if pair is None or pair.bundled:  # every bundle carries the bundled pair
        return BundleLauncher(ensure_deployed(device))
    from as2d_cli.bundle.build import pair_folder

    deployed = ensure_deployed(device, pair=pair)
    return BundleLauncher(deployed, models=deployed.carried(pair_folder(pair)))


def probe_python(device: Any) -> tuple[bool, str]:
    """Whether ``device`` has a python3 >= 3.11 that imports the runner's libraries."""
    res = device.shell(PROBE, deadline_s=120)
    for line in res.stdout.splitlines():
        parts = line.split()
        if (
            len(parts) == 3
            and parts[0] == "as2d-python"
            and parts[1].isdigit()
            and parts[2].isdigit()
        ):
            if (int(parts[1]), int(parts[2])) >= (3, 11):
                return True, f"python {parts[1]}.{parts[2]}"
            return False, f"python3 is {parts[1]}.{parts[2]}, the runner needs 3.11 or newer"
    detail = (res.stderr or res.stdout).strip().splitlines()
    return False, detail[-1] if detail else f"exit {res.exit_code}"


# ---------------------------------------------------------------------------- payload
@dataclass(frozen=True)
class Payload:
    """One part of the runner payload: ``app`` (code) or ``models``."""

    kind: str
    archive: Path
    digest: str  # SHA-256 of the canonical manifest (which lists every file's SHA-256)
    manifest: dict


def app_files(root: Path = PROJECT_ROOT) -> list[tuple[str, Path]]:
    """(name in the payload, host file) for the runner's code, ``app/<package>/...``: what
    ships to a phone (bundle.recipe) without the assets."""
    return [(f"app/{rel}", f) for rel, f in shipped_files(root) if not excluded(rel, (ASSETS,))]


def model_files(pair: ModelPair | None = None, cache: Path | None = None) -> list[tuple[str, Path]]:
    """``models/<file>`` for the model pair (default: the bundled one, as2d_cli/assets/models),
    after checking every file against models.json. An imported pair goes as one
    self-contained folder: its referenced files under ``models/<model>/`` and its manifest
    rewritten to name them there."""
    from as2d_cli.models.model_pair import load_pair, portable_files

    if pair is None:
        pair = load_pair()  # its files checked against their hashes
    else:
        pair.verify()
    if not pair.manifest.get("imported"):
        return [(f"models/{f.name}", f) for f in sorted(pair.directory.iterdir()) if f.is_file()]
    files, manifest = portable_files(pair)
    text = json.dumps(manifest, indent=1, sort_keys=True).encode()
    root = cache or cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    written = root / f"models-json-{hashlib.sha256(text).hexdigest()[:32]}.json"
    if not written.is_file():
        tmp = written.with_name(written.name + f".{os.getpid()}")
        tmp.write_bytes(text)
        tmp.replace(written)
    return [(f"models/{rel}", path) for rel, path in files] + [("models/models.json", written)]


def cache_dir() -> Path:
    base = os.environ.get("AS2D_PAYLOAD_CACHE")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "as2d" / "payload"


KEEP_ARCHIVES = 2  # per part: the current one and the one before (switching back is cheap)


def pack_part(kind: str, files: list[tuple[str, Path]], cache: Path | None = None) -> Payload:
    """One payload part, packed once per content hash into the payload cache (older
    archives of the same part beyond the last KEEP_ARCHIVES are deleted)."""
    hashes = {name: sha256_file(path) for name, path in files}
    manifest = {
        "schema": PAYLOAD_SCHEMA,
        "version": PAYLOAD_VERSION,
        "kind": kind,
        "toolkit": __version__,
        "python": ">=3.11",
        "files": hashes,
    }
    canonical = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(canonical).hexdigest()
    root = cache or cache_dir()
    archive = root / f"{kind}-{digest[:32]}.tar.gz"
    if archive.is_file() and _lead_member(archive) == canonical:
        os.utime(archive)  # recently used: kept by the pruning below
    else:  # missing, or not the archive its name promises (truncated, foreign): pack it again
        root.mkdir(parents=True, exist_ok=True)
        _pack(archive, canonical, files, hashes)
        old = sorted(root.glob(f"{kind}-*.tar.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in old[KEEP_ARCHIVES:]:
            stale.unlink(missing_ok=True)
    return Payload(kind, archive, digest, manifest)


def _lead_member(archive: Path) -> bytes | None:
    """The archive's first member (payload.json) read by streaming; None if unreadable."""
    try:
        with tarfile.open(archive, "r|gz") as tar:
            for member in tar:
                f = tar.extractfile(member) if member.name == "payload.json" else None
                return f.read() if f is not None else None
    except (OSError, EOFError, tarfile.TarError):
        return None
    return None


def build_payload(
    pair: ModelPair | None = None, cache: Path | None = None, root: Path = PROJECT_ROOT
) -> tuple[Payload, Payload]:
    """The runner payload for this checkout: (code, models). Two parts, so a code change
    pushes ~0.2 MB and the ~50 MB of models go to a phone once per model version."""
    return pack_part("app", app_files(root), cache), pack_part(
        "models", model_files(pair, cache), cache
    )


def _pack(
    out: Path, manifest: bytes, files: list[tuple[str, Path]], hashes: dict[str, str]
) -> None:
    """A reproducible .tar.gz: payload.json first, then the files in order (level 1:
    ONNX weights barely compress). Written aside and renamed, so a crash leaves no archive."""
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    try:
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
        ):

            def add(name: str, data: io.BytesIO, size: int) -> None:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = size, FIXED_MTIME, 0o644
                tar.addfile(info, data)

            add("payload.json", io.BytesIO(manifest), len(manifest))
            for name, path in files:
                data = path.read_bytes()
                if hashlib.sha256(data).hexdigest() != hashes[name]:
                    raise UserError(
                        f"{path} changed while the runner payload was being packed "
                        "(models being retrained?); retry when it is stable"
                    )
                add(name, io.BytesIO(data), len(data))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)


def runtime_area(device: Any) -> str:
    return posixpath.join(device.run_root(), RUNTIME_AREA)


def deploy_part(device: Any, part: Payload, deadline_s: float = 900.0) -> tuple[str, bool]:
    """Make sure ``device`` holds ``part`` unpacked at ``<area>/<kind>-<hash[:16]>``
    (pushing it only when that hash is not there); other versions of the same part are
    removed first (phones have little storage). Returns (path, pushed)."""
    area = runtime_area(device)
    target = posixpath.join(area, f"{part.kind}-{part.digest[:16]}")
    marker = posixpath.join(target, MARKER)
    if (device.read_files([marker]).get(marker) or "").strip() == part.digest:
        return target, False
    remote = posixpath.join(area, f"{part.kind}.tar.gz")
    q = shlex.quote
    stale = [
        posixpath.join(area, n) for n in device.list_dir(area) if n.startswith(f"{part.kind}-")
    ]
    if stale:
        device.shell(["rm", "-rf", *stale], deadline_s=120).check(
            f"removing the old runner {part.kind} in {area}"
        )
    device.shell(["mkdir", "-p", target], deadline_s=30).check(f"creating {target}")
    device.push(part.archive, remote, deadline_s=deadline_s)
    # The marker is written only when the unpack succeeded, so its presence proves a whole part.
    device.shell(
        f"python3 -m tarfile -e {q(remote)} {q(target)} && rm -f {q(remote)} && "
        f"echo {q(part.digest)} > {q(marker)}",
        deadline_s=deadline_s,
    ).check(
        f"unpacking the runner {part.kind} into {target} (needs ~{_mib(part)} MiB free under {area})"
    )
    if (device.read_files([marker]).get(marker) or "").strip() != part.digest:
        raise DeviceError(
            f"{device.serial}: the runner {part.kind} in {target} is incomplete after unpacking; "
            f"check free space under {device.run_root()} and retry"
        )
    return target, True


def deploy_payload(device: Any, app: Payload, models: Payload) -> PythonPayloadLauncher:
    """Both payload parts on ``device``; the launcher that starts the runner from them."""
    import time

    start = time.monotonic()
    app_path, app_pushed = deploy_part(device, app)
    models_path, models_pushed = deploy_part(device, models)
    pushed = tuple(k for k, p in (("app", app_pushed), ("models", models_pushed)) if p)
    return PythonPayloadLauncher(
        device.serial,
        runtime_area(device),
        app_path,
        models_path,
        pushed,
        time.monotonic() - start if pushed else 0.0,
    )


def _mib(part: Payload) -> int:
    return part.archive.stat().st_size * 2 // 2**20 + 10


def remove_payload(device: Any) -> bool:
    """Delete every runner payload the toolkit put on ``device``; True if there was one."""
    area = runtime_area(device)
    present = bool(device.list_dir(area))
    device.shell(["rm", "-rf", area], deadline_s=120).check(f"removing {area}")
    return present


# ---------------------------------------------------------------------------- corpus windows
def push_audio(device: Any, run_dir: str, cmds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The commands with every ``stream`` command's host audio file pushed into ``run_dir``
    and its ``audio`` renamed to that copy's name, relative to ``run_dir`` (the runner reads
    it there: ``FILES_ENV`` names the folder, as AS2D_CORPUS names the corpus)."""
    out: list[dict[str, Any]] = []
    for i, c in enumerate(cmds):
        path = c.get("audio")
        if c.get("op") == "stream" and isinstance(path, str):
            name = f"audio-{i}{Path(path).suffix}"
            device.push(Path(path), posixpath.join(run_dir, name))
            c = {**c, "audio": name}
        out.append(c)
    return out


def windows_in(cmds: Iterable[Mapping[str, Any]]) -> list[str]:
    """Corpus window ids the commands read, in first-use order."""
    out: list[str] = []
    for c in cmds:
        more = c.get("windows")  # a probe over several windows (calibration episodes)
        for w in [c.get("window"), *(more if isinstance(more, list) else [])]:
            if isinstance(w, str) and w not in out:
                out.append(w)
    return out


def push_windows(
    device: Any, run_dir: str, ids: Sequence[str], corpus_dir: Path | None = None
) -> str:
    """Push a corpus holding only ``ids`` (manifest + their audio) into ``run_dir/corpus``;
    return that directory (the value for AS2D_CORPUS). An id may be a window's or a
    spoken-QA request's (which carries the window whose audio it asks about along). An
    unknown id is one UserError naming it, before anything is pushed."""
    from as2d_cli.corpus.manifest import load_corpus

    corpus = load_corpus(corpus_dir)
    # raises: no window 'X' in <manifest>; `as2d corpus list` shows the ids
    asked = {i: corpus.get(i) for i in ids}
    wanted = {w.of or i for i, w in asked.items()}  # a QA request reads its window's audio
    data = json.loads(corpus.path.read_text(encoding="utf-8"))
    keep = [w for w in data["windows"] if w.get("id") in wanted]
    data["windows"] = keep
    if "requests" in data:  # the spoken-QA requests asked for, or about the windows pushed
        data["requests"] = [
            r for r in data["requests"] if r.get("id") in asked or r.get("window") in asked
        ]
    remote = posixpath.join(run_dir, "corpus")
    dirs = sorted({posixpath.dirname(posixpath.join(remote, w["audio"])) for w in keep} | {remote})
    device.shell(["mkdir", "-p", *dirs], deadline_s=30).check(f"creating {remote}")
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "manifest.json"
        manifest.write_text(json.dumps(data, indent=1), encoding="utf-8")
        device.push(manifest, posixpath.join(remote, "manifest.json"))
    base = corpus.path.parent
    for w in keep:
        device.push(base / w["audio"], posixpath.join(remote, w["audio"]))
    return remote
