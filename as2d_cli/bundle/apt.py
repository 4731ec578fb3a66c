"""Debian arm64 packages through a private apt state: resolve, download, verify.

apt-get runs with its own lists, cache, status and sources under the bundle cache, with
the architecture set to the bundle's, so the host's package state is never read or
changed and no foreign architecture is ever enabled on it (``dpkg --add-architecture``
is never called). Packages are only downloaded and later unpacked with ``dpkg -x``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from as2d_cli.bundle.cache import HashMemo
from as2d_cli.bundle.recipe import Recipe
from as2d_cli.bundle.tools import require_tool, run_tool
from as2d_cli.errors import UserError

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LISTS_MAX_AGE_S = 24 * 3600
_APT_HINT = (
    "check that Debian's package mirror is reachable (try `apt-get update`), "
    "or pass another mirror with --debian-mirror"
)
_URI_LINE = re.compile(
    r"^'(?P<uri>[^']+)' (?P<file>\S+) (?P<size>\d+) (?P<algo>\w+):(?P<hash>[0-9a-f]+)$"
)


@dataclass(frozen=True)
class DebPackage:
    """One resolved Debian package: what apt will download and the hash it must have."""

    name: str
    version: str
    arch: str
    filename: str
    size: int
    sha256: str
    uri: str

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "arch": self.arch,
            "filename": self.filename,
            "size": self.size,
            "sha256": self.sha256,
        }


class PrivateApt:
    """apt-get confined to a state directory of its own, for one architecture and suite."""

    def __init__(self, recipe: Recipe, state_dir: Path) -> None:
        self.recipe = recipe
        self.root = state_dir
        self.apt_get = require_tool(
            "apt-get", "the bundle builder needs a Debian-family host with apt-get and dpkg"
        )
        if not Path(KEYRING).is_file():
            raise UserError(
                f"Debian's archive keyring {KEYRING} is missing; install it with "
                "`apt-get install debian-archive-keyring`"
            )

    # -- configuration -------------------------------------------------------------

    def _prepare(self) -> None:
        for sub in ("lists/partial", "cache/archives/partial", "etc"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "status").touch()
        r = self.recipe
        opts = f"[arch={r.arch} signed-by={KEYRING}]"
        sources = (
            f"deb {opts} {r.debian_mirror} {r.debian_suite} main\n"
            f"deb {opts} {r.debian_mirror} {r.debian_suite}-updates main\n"
            f"deb {opts} {r.debian_security_mirror} {r.debian_suite}-security main\n"
        )
        path = self.root / "etc" / "sources.list"
        if not path.exists() or path.read_text() != sources:
            path.write_text(sources)
            self._invalidate_lists()

    def _invalidate_lists(self) -> None:
        for f in (self.root / "lists").glob("*"):
            if f.is_file():
                f.unlink()

    def _options(self) -> list[str]:
        a = self.recipe.arch
        o = {
            "APT::Architecture": a,
            "APT::Architectures": a,
            "Dir::State": str(self.root),
            "Dir::State::Lists": str(self.root / "lists"),
            "Dir::State::status": str(self.root / "status"),
            "Dir::Cache": str(self.root / "cache"),
            "Dir::Etc::SourceList": str(self.root / "etc" / "sources.list"),
            "Dir::Etc::SourceParts": str(self.root / "etc" / "sources.list.d"),
            "Dir::Etc::Preferences": str(self.root / "etc" / "preferences"),
            "Dir::Etc::PreferencesParts": str(self.root / "etc" / "preferences.d"),
            "Acquire::Languages": "none",
            "APT::Sandbox::User": "root",
            "Debug::NoLocking": "1",
        }
        argv: list[str] = []
        for key, value in o.items():
            argv += ["-o", f"{key}={value}"]
        return argv

    # -- operations ----------------------------------------------------------------

    def lists_age(self) -> float | None:
        """Seconds since the package lists were last fetched, None if never."""
        files = [f for f in (self.root / "lists").glob("*Packages*") if f.is_file()]
        if not files:
            return None
        return time.time() - min(f.stat().st_mtime for f in files)

    def update(self, *, force: bool = False) -> bool:
        """Fetch the arm64 package lists if missing, stale or forced; True if fetched."""
        self._prepare()
        age = self.lists_age()
        if not force and age is not None and age < LISTS_MAX_AGE_S:
            return False
        run_tool(
            [self.apt_get, *self._options(), "--error-on=any", "-qq", "update"],
            what=f"apt-get update of the {self.recipe.arch} package lists",
            hint=_APT_HINT,
        )
        if self.lists_age() is None:
            raise UserError(
                f"apt-get update fetched no {self.recipe.arch} package lists; {_APT_HINT}"
            )
        for f in (self.root / "lists").glob("*Packages*"):
            f.touch()
        return True

    def resolve(self, names: tuple[str, ...]) -> list[DebPackage]:
        """The exact version, file and SHA-256 of each named package in the current lists."""
        self._prepare()
        out = run_tool(
            [self.apt_get, *self._options(), "download", "--print-uris", *names],
            what=f"resolving {self.recipe.arch} packages {' '.join(names)}",
            hint="check the package names in the bundle recipe, or refresh the lists with --refresh",
            cwd=self.root,
        )
        found: list[DebPackage] = []
        for line in out.splitlines():
            m = _URI_LINE.match(line.strip())
            if not m:
                continue
            if m["algo"].upper() != "SHA256":
                raise UserError(
                    f"apt reported a {m['algo']} hash for {m['file']}; a SHA256 hash is required"
                )
            fname = m["file"]
            name, version, arch = unquote(fname[: -len(".deb")]).split("_")
            found.append(
                DebPackage(name, version, arch, fname, int(m["size"]), m["hash"], m["uri"])
            )
        missing = sorted(set(names) - {p.name for p in found})
        if missing:
            raise UserError(
                f"apt could not resolve {', '.join(missing)} for {self.recipe.arch}; {_APT_HINT}"
            )
        return sorted(found, key=lambda p: p.name)

    def fetch(
        self, packages: list[DebPackage], into: Path, memo: HashMemo | None = None
    ) -> list[Path]:
        """Download the packages not yet in ``into`` (verifying each SHA-256); return their paths."""
        into.mkdir(parents=True, exist_ok=True)
        memo = memo or HashMemo()
        todo = [p for p in packages if not _good(into / p.filename, p.sha256, memo)]
        if todo:
            run_tool(
                [
                    self.apt_get,
                    *self._options(),
                    "-qq",
                    "download",
                    *[f"{p.name}={p.version}" for p in todo],
                ],
                what=f"downloading {len(todo)} {self.recipe.arch} packages",
                hint=_APT_HINT,
                cwd=into,
            )
        paths = []
        for p in packages:
            path = into / p.filename
            if not _good(path, p.sha256, memo):
                raise UserError(
                    f"downloaded {p.filename} does not match the SHA-256 the package lists give; "
                    f"delete {path} and build again with --refresh"
                )
            paths.append(path)
        return paths


def _good(path: Path, sha256: str, memo: HashMemo) -> bool:
    return path.is_file() and memo.sha256(path) == sha256
