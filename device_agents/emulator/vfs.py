"""The emulated phone's file system: real files under a host temp dir (the writable areas
such as /data/local/tmp) plus dynamic read-only files (sysfs, procfs) computed on read from
the phone's state, so injected faults show up exactly where a real phone shows them."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

WRITABLE = ("/data/local/tmp", "/sdcard")

DynamicFile = Callable[[], str]


def normalize(path: str, cwd: str = "/") -> str:
    if not path.startswith("/"):
        path = posixpath.join(cwd, path)
    norm = posixpath.normpath(path)
    return "/" if norm in ("", ".", "//") else norm.replace("//", "/")


class VirtualFS:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._dynamic: dict[str, DynamicFile] = {}
        for area in WRITABLE:
            self.host_path(area).mkdir(parents=True, exist_ok=True)

    # -- mapping --------------------------------------------------------------------
    def host_path(self, vpath: str) -> Path:
        """Host path of a virtual path (normalized first, so '..' cannot escape root)."""
        return self.root / normalize(vpath).lstrip("/")

    def writable(self, vpath: str) -> bool:
        v = normalize(vpath)
        return any(v == w or v.startswith(w + "/") for w in WRITABLE)

    def add_dynamic(self, vpath: str, producer: DynamicFile) -> None:
        """Register a read-only file whose content is computed on every read."""
        self._dynamic[normalize(vpath)] = producer

    def remove_dynamic(self, vpath: str) -> None:
        self._dynamic.pop(normalize(vpath), None)

    def _dynamic_dir(self, vpath: str) -> bool:
        prefix = "/" if vpath == "/" else vpath + "/"
        return any(p.startswith(prefix) for p in self._dynamic)

    # -- queries --------------------------------------------------------------------
    def stat(self, vpath: str) -> tuple[int, int, int] | None:
        """(mode, size, mtime) or None when missing."""
        v = normalize(vpath)
        if v in self._dynamic:
            return (stat.S_IFREG | 0o444, len(self._dynamic[v]().encode()), int(time.time()))
        hp = self.host_path(v)
        if hp.exists():
            st = hp.stat()
            return (st.st_mode, st.st_size, int(st.st_mtime))
        if self._dynamic_dir(v):
            return (stat.S_IFDIR | 0o755, 4096, int(time.time()))
        return None

    def is_dir(self, vpath: str) -> bool:
        st = self.stat(vpath)
        return st is not None and stat.S_ISDIR(st[0])

    def listdir(self, vpath: str) -> list[tuple[str, tuple[int, int, int]]]:
        v = normalize(vpath)
        names: set[str] = set()
        prefix = "/" if v == "/" else v + "/"
        for p in self._dynamic:
            if p.startswith(prefix):
                names.add(p[len(prefix) :].split("/", 1)[0])
        hp = self.host_path(v)
        if hp.is_dir():
            names.update(os.listdir(hp))
        out = []
        for name in sorted(names):
            st = self.stat(posixpath.join(v, name))
            if st is not None:
                out.append((name, st))
        return out

    def read_file(self, vpath: str) -> bytes:
        v = normalize(vpath)
        if v in self._dynamic:
            return self._dynamic[v]().encode()
        hp = self.host_path(v)
        if hp.is_dir() or self._dynamic_dir(v):
            raise IsADirectoryError(f"{v}: Is a directory")
        if not hp.exists():
            raise FileNotFoundError(f"{v}: No such file or directory")
        return hp.read_bytes()

    def glob(self, pattern: str, cwd: str = "/") -> list[str]:
        """Expand * ? [..] per path segment; no match returns []."""
        absolute = normalize(pattern, cwd)
        parts = [p for p in absolute.split("/") if p]
        paths = ["/"]
        for part in parts:
            nxt: list[str] = []
            for base in paths:
                if any(c in part for c in "*?["):
                    for name, _ in self.listdir(base):
                        if fnmatch.fnmatchcase(name, part) and not name.startswith("."):
                            nxt.append(posixpath.join(base, name))
                else:
                    cand = posixpath.join(base, part)
                    if self.stat(cand) is not None:
                        nxt.append(cand)
            paths = nxt
        return sorted(paths)

    # -- changes (writable areas only, as for the shell user on a real phone) -------
    def _deny(self, vpath: str) -> str | None:
        v = normalize(vpath)
        if self.writable(v):
            return None
        if v in self._dynamic or self._dynamic_dir(v):
            return f"{v}: Permission denied"
        return f"{v}: Read-only file system"

    def write_file(
        self, vpath: str, data: bytes, mode: int = 0o644, mtime: int = 0, append: bool = False
    ) -> str | None:
        """Write a file; returns an error message instead of raising."""
        err = self._deny(vpath)
        if err:
            return err
        hp = self.host_path(vpath)
        if hp.is_dir():
            return f"{normalize(vpath)}: Is a directory"
        hp.parent.mkdir(parents=True, exist_ok=True)  # fixed_push_mkdir semantics
        with open(hp, "ab" if append else "wb") as fh:
            fh.write(data)
        if not append:
            os.chmod(hp, mode & 0o7777 or 0o644)
            if mtime:
                os.utime(hp, (mtime, mtime))
        return None

    def open_write(self, vpath: str) -> tuple[BinaryIO | None, str | None]:
        """(file, None) to stream a new file into a writable area, or (None, error)."""
        err = self._deny(vpath)
        if err:
            return None, err
        hp = self.host_path(vpath)
        if hp.is_dir():
            return None, f"{normalize(vpath)}: Is a directory"
        hp.parent.mkdir(parents=True, exist_ok=True)  # fixed_push_mkdir semantics
        return open(hp, "wb"), None

    def finish_write(self, vpath: str, mode: int, mtime: int) -> None:
        hp = self.host_path(vpath)
        os.chmod(hp, mode & 0o7777 or 0o644)
        if mtime:
            os.utime(hp, (mtime, mtime))

    def open_read(self, vpath: str) -> BinaryIO:
        """A file to stream from (dynamic files are materialised in memory)."""
        v = normalize(vpath)
        if v in self._dynamic:
            import io

            return io.BytesIO(self._dynamic[v]().encode())
        hp = self.host_path(v)
        if hp.is_dir() or self._dynamic_dir(v):
            raise IsADirectoryError(f"{v}: Is a directory")
        if not hp.exists():
            raise FileNotFoundError(f"{v}: No such file or directory")
        return open(hp, "rb")

    def mkdir(self, vpath: str, parents: bool) -> str | None:
        err = self._deny(vpath)
        if err:
            return err
        hp = self.host_path(vpath)
        try:
            hp.mkdir(parents=parents, exist_ok=parents)
        except FileExistsError:
            return f"{normalize(vpath)}: File exists"
        except FileNotFoundError:
            return f"{normalize(vpath)}: No such file or directory"
        return None

    def remove(self, vpath: str, recursive: bool) -> str | None:
        v = normalize(vpath)
        if v in WRITABLE:
            return f"{v}: Permission denied"
        err = self._deny(v)
        if err:
            return err
        hp = self.host_path(v)
        if not hp.exists() and not hp.is_symlink():
            return f"{v}: No such file or directory"
        if hp.is_dir() and not hp.is_symlink():
            if not recursive:
                return f"{v}: Is a directory"
            shutil.rmtree(hp)
        else:
            hp.unlink()
        return None

    def chmod(self, vpath: str, mode: int) -> str | None:
        err = self._deny(vpath)
        if err:
            return err
        hp = self.host_path(vpath)
        if not hp.exists():
            return f"{normalize(vpath)}: No such file or directory"
        os.chmod(hp, mode)
        return None
