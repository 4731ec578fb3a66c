"""Deterministic packing: sorted entries, fixed owner, mode and mtime, gzip without a
timestamp, so the same tree always gives the same bytes."""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

from as2d_cli.errors import FormatError

# 2020-01-01T00:00:00Z: a fixed, non-zero mtime (some tar readers warn about 1970).
FIXED_MTIME = 1577836800


def pack(
    root: Path, paths: list[str], out: Path, level: int = 1, lead: tuple[str, ...] = ()
) -> None:
    """Write ``paths`` (relative to ``root``) into a reproducible .tar.gz at ``out``.

    Level 1: the ONNX weights and shared libraries barely compress (level 6 saves ~4%
    for 1.5x the time). ``lead`` files (top-level) come first, so readers find them
    without decompressing the rest; everything else follows in sorted order."""
    tmp = out.with_name(out.name + ".partial")
    dirs: set[str] = set()
    for rel in paths:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                for rel in [*lead, *sorted((dirs | set(paths)) - set(lead))]:
                    path = root / rel
                    info = tarfile.TarInfo(rel)
                    info.mtime = FIXED_MTIME
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    if rel in dirs:
                        info.type = tarfile.DIRTYPE
                        info.mode = 0o755
                        tar.addfile(info)
                        continue
                    info.size = path.stat().st_size
                    info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
    tmp.replace(out)


def unpack(archive: Path, into: Path) -> None:
    """Extract a bundle archive, refusing links and paths that leave ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                if (
                    m.name.startswith("/")
                    or ".." in m.name.split("/")
                    or not (m.isfile() or m.isdir())
                ):
                    raise FormatError(
                        f"{archive}: unsafe entry {m.name!r}; rebuild with `as2d bundle build`"
                    )
            tar.extractall(into, members=members, filter="fully_trusted")
    except (tarfile.TarError, OSError, EOFError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise FormatError(
                f"{archive}: no such bundle archive; build one with `as2d bundle build`"
            ) from None
        raise FormatError(
            f"{archive}: not a readable bundle archive ({exc}); rebuild with `as2d bundle build`"
        ) from None


def read_member(archive: Path, name: str) -> bytes:
    """One file's bytes, reading the archive only up to it (streaming, no index)."""
    try:
        with tarfile.open(archive, "r|gz") as tar:
            for member in tar:
                if member.name == name and member.isfile():
                    f = tar.extractfile(member)
                    assert f is not None
                    return f.read()
    except FileNotFoundError:
        raise FormatError(
            f"{archive}: no such bundle archive; build one with `as2d bundle build`"
        ) from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise FormatError(
            f"{archive}: not a readable bundle archive ({exc}); rebuild with `as2d bundle build`"
        ) from None
    raise FormatError(f"{archive}: no {name} inside; rebuild with `as2d bundle build`")
