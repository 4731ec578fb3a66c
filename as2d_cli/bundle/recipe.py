"""What goes into a bundle: the Debian packages, the wheels and the project parts.

A recipe is plain data; its canonical JSON is part of the build's cache key, so any
change to it gives a new bundle.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from as2d_cli.errors import UserError

# Bumped when the builder's output for the same inputs changes (layout, pruning, packing).
BUILDER_VERSION = 2

SUPPORTED_ARCHES = ("arm64",)

# glibc's loader file name and the qemu binary that runs it on a foreign host, per arch.
LOADER = {"arm64": "ld-linux-aarch64.so.1"}
MULTIARCH = {"arm64": "aarch64-linux-gnu"}
QEMU = {"arm64": "qemu-aarch64-static"}
WHEEL_PLATFORMS = {
    "arm64": ("manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64")
}

# The interpreter and the libraries CPython's kept stdlib modules link against. Libraries
# of modules we drop (sqlite3, readline, curses, dbm, nis, crypt) are left out on purpose.
DEBIAN_PACKAGES = (
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libuuid1",
)

# Pinned to the host's tested versions so the bundle's numerics match the host runner's.
# numpy and onnxruntime run the models; tokenizers reads the models' vocabulary, jinja2
# (with markupsafe) renders an audio language model's chat template, and soundfile (with
# cffi's backend and typing_extensions) reads the corpus audio the runner decodes. Their
# other declared dependencies are not imported on the runner's path.
WHEELS = (
    "numpy==2.4.6",
    "onnxruntime==1.32.0",
    "tokenizers==0.23.3",
    "jinja2==3.1.6",
    "markupsafe==3.0.3",
    "soundfile==0.14.0",
    "cffi==2.1.1",
    "typing_extensions==4.16.0",
)

# What ships to a phone, the one list: the project packages the runner needs (native and
# what it imports) minus the parts only the host runs — the CLI, the bundle builder, the
# launchers. The arm64 bundle carries these files; a phone with Python gets the same code
# as the runner payload (launch.payload), its assets (the models) as a part of their own.
# device_agents (the host's view of devices, and the emulated phone) never ships.
PROJECT_PACKAGES = ("as2d_cli", "native")
PROJECT_EXCLUDES = (
    "as2d_cli/cli",
    "as2d_cli/bundle",
    "as2d_cli/launch",
    # model pairs shipped in the package (and their traces) travel only when a bundle is
    # asked to carry one (`as2d bundle build --models NAME`: bundle.build.add_pair)
    "as2d_cli/assets/pairs",
    "*/__pycache__",
    "*.pyc",
)


def excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    """Whether project path ``rel`` (posix) is one of ``patterns`` or under one."""
    return any(rel == p or rel.startswith(p + "/") or fnmatch.fnmatch(rel, p) for p in patterns)


def shipped_files(
    root: Path,
    packages: tuple[str, ...] = PROJECT_PACKAGES,
    excludes: tuple[str, ...] = PROJECT_EXCLUDES,
) -> list[tuple[str, Path]]:
    """(path relative to ``root``, file) of every project file that ships to a phone."""
    out: list[tuple[str, Path]] = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and not excluded(rel, excludes):
                out.append((rel, path))
    return out


@dataclass(frozen=True)
class Recipe:
    """Everything that decides a bundle's content, besides the fetched files' bytes."""

    arch: str = "arm64"
    debian_suite: str = "bookworm"
    debian_mirror: str = "http://deb.debian.org/debian"
    debian_security_mirror: str = "http://deb.debian.org/debian-security"
    debian_packages: tuple[str, ...] = DEBIAN_PACKAGES
    wheels: tuple[str, ...] = WHEELS
    python_version: str = "3.11"
    project_packages: tuple[str, ...] = PROJECT_PACKAGES
    project_excludes: tuple[str, ...] = PROJECT_EXCLUDES
    builder_version: int = BUILDER_VERSION

    def __post_init__(self) -> None:
        if self.arch not in SUPPORTED_ARCHES:
            raise UserError(
                f"unsupported bundle architecture {self.arch!r}; use one of {', '.join(SUPPORTED_ARCHES)}"
            )
        for spec in self.wheels:
            if "==" not in spec:
                raise UserError(
                    f"wheel {spec!r} must be pinned as NAME==VERSION so the bundle is reproducible"
                )

    @property
    def loader(self) -> str:
        return LOADER[self.arch]

    @property
    def multiarch(self) -> str:
        return MULTIARCH[self.arch]

    @property
    def qemu(self) -> str:
        return QEMU[self.arch]

    @property
    def wheel_platforms(self) -> tuple[str, ...]:
        return WHEEL_PLATFORMS[self.arch]

    def to_json(self) -> dict:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        return data

    def canonical(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
