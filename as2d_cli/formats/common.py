"""Machinery shared by every stored file: schema/version checks, environment metadata,
and atomic writes that never silently overwrite.

Every stored document carries ``schema`` (a dotted name such as ``as2d.trace``) and an
integer ``version``. A reader supports exactly the versions it has upgrade steps for
(asv's ``api_version`` idea): an older file with no upgrade step and any newer file are
refused with a message that says what to do.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from as2d_cli import __version__
from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats import registry

# Upgrader: takes a document of version v and returns the same content as version v+1.
Upgrader = Callable[[dict], dict]


def check_version(
    doc: Any,
    *,
    schema: str,
    version: int,
    where: str,
    upgrades: Mapping[int, Upgrader] | None = None,
    remedy_old: str = "regenerate it with this toolkit",
) -> dict:
    """Check ``doc``'s schema name and version; return it upgraded to ``version``.

    ``where`` names the file (and line) for the message. ``upgrades[v]`` turns version v
    into v+1; versions with no path to ``version`` are refused. Every stored file keeps its
    version under ``version``."""
    if not isinstance(doc, dict):
        raise FormatError(
            f"{where}: expected a JSON/YAML object with 'schema' and 'version', got {type(doc).__name__}; is this an {schema} file?"
        )
    got = doc.get("schema")
    if got != schema:
        raise FormatError(
            f"{where}: schema is {got!r}, expected {schema!r}; pass an {schema} file here"
        )
    key = "version"
    v = doc.get(key)
    if type(v) is not int:
        raise FormatError(
            f"{where}: key {key!r} must be an integer, got {v!r}; the file is damaged or not an {schema} file"
        )
    if v > version:
        raise FormatError(
            f"{where}: {schema} version {v} is newer than this toolkit reads (version {version}); "
            f"upgrade as2d (this is {__version__}) to read it"
        )
    upgrades = upgrades or {}
    while v < version:
        step = upgrades.get(v)
        if step is None:
            raise FormatError(
                f"{where}: {schema} version {v} is older than this toolkit reads (version {version}) "
                f"and cannot be upgraded; {remedy_old}"
            )
        doc = step(doc)
        v += 1
        doc[key] = v
    return doc


@functools.cache
def json_schema(name: str) -> dict:
    """A JSON Schema shipped under ``as2d_cli/formats/schemas/``."""
    text = resources.files("as2d_cli.formats").joinpath("schemas", name).read_text()
    return json.loads(text)


@functools.cache
def _validator(name: str):
    import jsonschema

    cls = jsonschema.validators.validator_for(json_schema(name))
    return cls(json_schema(name))


def _dotted(path: Any) -> str:
    """JSON path → ``costs.verify.idle_ms.K3`` / ``sources.qwen.tokens[3]`` (as the trace
    record checks spell keys)."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def validate_schema(doc: Any, name: str, where: str) -> None:
    """Validate ``doc`` against a shipped JSON Schema; the first error becomes one line."""
    v = _validator(name)
    errors = sorted(
        v.iter_errors(doc), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)))
    )
    if errors:
        e = errors[0]
        key = _dotted(e.absolute_path) or "(top level)"
        msg = e.message if len(e.message) <= 200 else e.message[:160] + " … " + e.message[-30:]
        raise FormatError(f"{where}: key {key}: {msg}; fix the file or regenerate it")


def plain(x: Any) -> Any:
    """Plain YAML/JSON data: mappings → dicts, tuples → lists, numpy scalars → Python
    numbers (safe_dump cannot represent tuples or numpy types)."""
    if isinstance(x, Mapping):
        return {(k if isinstance(k, (str, int)) else str(k)): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, (str, bytes)):
        return x.item()
    return x


def git_commit() -> str:
    """The project's git commit (``unknown`` outside a checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def utc_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def environment(device: Mapping[str, Any] | None = None) -> dict:
    """Environment metadata stored with every result: toolkit, commit, time, host, device."""
    env: dict[str, Any] = {
        "toolkit_version": __version__,
        "git_commit": git_commit(),
        "created": utc_now(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if device is not None:
        env["device"] = dict(device)
    return env


def read_json(path: Path, missing: str, fix: str, error: type[Exception] = UserError) -> Any:
    """A JSON file's content, or one line: ``missing`` when there is no file, the parse
    error and ``fix`` when it is not JSON."""
    if not path.is_file():
        raise UserError(missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path} is not valid JSON ({exc}); {fix}") from None


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def safe_name(text: str, default: str = "") -> str:
    """``text`` usable as one file or folder name: anything but letters, digits and -_. becomes _."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or default


def next_free(path: str | Path) -> Path:
    """``path`` itself if free, else ``stem-2.ext``, ``stem-3.ext``… (for callers that
    prefer a new name over refusing)."""
    p = Path(path)
    if not p.exists():
        return p
    name = p.name
    stem, dot, ext = name.partition(".")
    i = 2
    while True:
        q = p.with_name(f"{stem}-{i}{dot}{ext}")
        if not q.exists():
            return q
        i += 1


@functools.cache
def _umask() -> int:
    """The process's umask, read once when a file is first written (reading it means
    setting it, so not at import time)."""
    old = os.umask(0)
    os.umask(old)
    return old


def _exists(p: Path) -> str:
    return (
        f"{p}: already exists and is never overwritten; choose another output name or remove that file "
        "(only commands that offer --force replace it)"
    )


def fresh_folder(base: str | Path) -> Path:
    """Create and return ``base``, or ``base-2``, ``base-3``… when taken: a run's own
    results folder, never an earlier one (mkdir is the atomic claim)."""
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, 1000):
        cand = base if k == 1 else base.with_name(f"{base.name}-{k}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            continue
    raise UserError(
        f"could not create a fresh results folder next to {base}; clean up old runs in that folder"
    )


def append_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Append ``rows`` as JSON lines and fsync: a record that survives a crash mid-run
    (a line torn by one is dropped by whoever resumes)."""
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(folder: Path) -> None:
    """Make a rename or unlink in ``folder`` durable (a no-op where a folder cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _place(tmp: str | Path, p: Path, force: bool) -> None:
    """Move the finished, fsynced temp file ``tmp`` to ``p`` (an existing ``p`` is replaced
    only with ``force``), then fsync the folder so the new name survives a crash."""
    if force:
        os.replace(tmp, p)
    else:
        try:
            os.link(tmp, p)  # atomic create-if-absent: a racing writer cannot be clobbered
        except FileExistsError:
            raise UserError(_exists(p)) from None
        except OSError:
            # Filesystems without hard links: fall back to an exclusive check + rename.
            if p.exists():
                raise UserError(_exists(p)) from None
            os.replace(tmp, p)
    _fsync_dir(p.parent)


def write_atomic(path: str | Path, data: bytes, *, force: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, then link
    or rename). Without ``force`` an existing file is never replaced: the call refuses with
    a UserError and leaves both the old file and no temp file behind."""
    p = Path(path)
    if not force and p.exists():
        raise UserError(_exists(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is for the temp file, not the result
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _place(tmp, p, force)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return p


@contextmanager
def atomic_path(path: str | Path, *, force: bool = False) -> Iterator[Path]:
    """A temp path beside ``path`` for writers that take a path (pandas, matplotlib): what
    they write there is fsynced and moved to ``path`` when the block ends without an
    error, and removed otherwise. The temp name keeps ``path``'s suffix (matplotlib picks
    the image format from it). ``force`` as in :func:`write_atomic`."""
    p = Path(path)
    if not force and p.exists():
        raise UserError(_exists(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=f".tmp{p.suffix}", dir=p.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        _fsync_file(tmp)
        _place(tmp, p, force)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_files(folder: str | Path, *, force: bool = False) -> Iterator[Path]:
    """A hidden scratch folder inside ``folder`` for writers that name their own files:
    when the block ends without an error every file written there is fsynced and moved
    into ``folder`` (none when one of them exists there and ``force`` is not given); the
    scratch folder is removed either way."""
    folder = Path(folder)
    scratch = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder))
    try:
        yield scratch
        names = sorted(p.name for p in scratch.iterdir() if p.is_file())
        for n in names if not force else ():
            if (folder / n).exists():
                raise UserError(_exists(folder / n))
        for n in names:
            os.chmod(scratch / n, 0o666 & ~_umask())
            _fsync_file(scratch / n)
            _place(scratch / n, folder / n, force)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# A results folder's manifest (docs/formats.md, "as2d.manifest"): every file with its size
# and sha256, written last; while a command writes the folder, ``complete`` is false and
# the INCOMPLETE note beside it says the same for people.
MANIFEST = "manifest.json"
INCOMPLETE = "INCOMPLETE"
MANIFEST_SCHEMA, MANIFEST_VERSION = registry.name_version("as2d.manifest")
# Version history: 1 — first release.


def file_entry(path: str | Path) -> dict[str, Any]:
    """A manifest's record of one file: its size and sha256."""
    return {"size": Path(path).stat().st_size, "sha256": sha256_file(path)}


def read_manifest(folder: str | Path) -> dict | None:
    """``folder``'s manifest (None: there is none); a damaged one is refused in one line."""
    p = Path(folder) / MANIFEST
    if not p.exists():
        return None
    redo = "the folder is damaged; run the command that wrote it again"
    doc = read_json(p, f"{p}: no such file", redo, error=FormatError)
    doc = check_version(
        doc, schema=MANIFEST_SCHEMA, version=MANIFEST_VERSION, where=str(p), remedy_old=redo
    )
    files = doc.get("files")
    if (
        not isinstance(doc.get("complete"), bool)
        or not isinstance(files, dict)
        or not all(
            isinstance(e, dict) and type(e.get("size")) is int and isinstance(e.get("sha256"), str)
            for e in files.values()
        )
    ):
        raise FormatError(
            f"{p}: expected 'complete' (true/false) and 'files' (name → size, sha256); {redo}"
        )
    if not doc["complete"] and not all(
        isinstance(doc.get(k), t)
        for k, t in (("writing", str), ("command", str), ("in_place", bool), ("pending", list))
    ):
        raise FormatError(
            f"{p}: an incomplete manifest needs 'writing', 'command', 'in_place' and 'pending'; {redo}"
        )
    return doc


def _manifest_bytes(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode("utf-8")


def incomplete_note(folder: Path, doc: Mapping[str, Any]) -> str:
    """The INCOMPLETE note's text: who is writing the folder, what may be missing, what to run."""
    todo = (
        f"Resume it with `{doc['command']}`."
        if doc["in_place"]
        else f"Run `{doc['command']}` again (it writes a new folder) and delete this one."
    )
    return (
        f"{folder} is incomplete: `{doc['writing']}` began writing it at {doc['updated']} and has "
        "not finished.\n"
        "If that command is no longer running it was interrupted, and these files may be "
        f"missing or unfinished: {', '.join(doc['pending'])}.\n"
        f"{todo}\n"
        "`as2d report`, `as2d compare` and `as2d eval --append` refuse the folder until "
        f"{MANIFEST} says it is complete.\n"
    )


def mark_writing(
    folder: str | Path,
    *,
    writing: str,
    pending: Iterable[str],
    command: str,
    in_place: bool,
    files: Mapping[str, Any],
) -> dict:
    """Before a command writes into ``folder``: the manifest says ``complete: false`` —
    ``writing`` (the command), ``pending`` (the files it writes), ``command`` (what resumes
    it, ``in_place``, or redoes it in a new folder) and ``files`` (the entries, from the
    folder's manifest, of the files it leaves alone: those of ``pending`` are dropped) —
    then the INCOMPLETE note says so for people. Manifest first: an interruption between
    the two still leaves the folder marked incomplete."""
    folder = Path(folder)
    pending = list(pending)
    doc = {
        "schema": MANIFEST_SCHEMA,
        "version": MANIFEST_VERSION,
        "complete": False,
        "updated": utc_now(),
        "toolkit_version": __version__,
        "writing": writing,
        "pending": pending,
        "command": command,
        "in_place": in_place,
        "files": {k: v for k, v in files.items() if k not in pending},
    }
    write_atomic(folder / MANIFEST, _manifest_bytes(doc), force=True)
    write_atomic(folder / INCOMPLETE, incomplete_note(folder, doc).encode("utf-8"), force=True)
    return doc


def mark_complete(folder: str | Path) -> dict:
    """After the writing :func:`mark_writing` announced: the files it kept and the pending
    ones now there, each with its size and sha256, in a manifest with ``complete: true``.
    The INCOMPLETE note goes first, so an interruption in between leaves the manifest
    still saying incomplete."""
    folder = Path(folder)
    doc = read_manifest(folder)
    if doc is None:
        raise FileNotFoundError(f"{folder / MANIFEST} vanished while the folder was written")
    files = dict(doc["files"])
    for name in doc.get("pending") or []:
        if (folder / name).is_file():
            files[name] = file_entry(folder / name)
    if (folder / INCOMPLETE).exists():
        os.unlink(folder / INCOMPLETE)
        _fsync_dir(folder)
    done = {
        "schema": MANIFEST_SCHEMA,
        "version": MANIFEST_VERSION,
        "complete": True,
        "updated": utc_now(),
        "toolkit_version": __version__,
        "files": dict(sorted(files.items())),
    }
    write_atomic(folder / MANIFEST, _manifest_bytes(done), force=True)
    return done


def manifest_mismatch(
    folder: str | Path, doc: Mapping[str, Any], skip: Iterable[str] = ()
) -> tuple[str, str] | None:
    """The first file of ``doc['files']`` (names in ``skip`` aside) that is not as recorded:
    (name, what differs), or None when every one matches."""
    folder = Path(folder)
    skipped = set(skip)
    for name, want in doc["files"].items():
        if name in skipped:
            continue
        p = folder / name
        if not p.is_file():
            return name, "is missing"
        size = p.stat().st_size
        if size != want["size"]:
            return name, f"has {size} bytes where the manifest records {want['size']}"
        got = sha256_file(p)
        if got != want["sha256"]:
            return name, f"has sha256 {got[:12]}… where the manifest records {want['sha256'][:12]}…"
    return None
