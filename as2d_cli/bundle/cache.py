"""Where the builder keeps downloads and finished bundles (~/.cache/as2d/bundle)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from as2d_cli.formats.common import (
    sha256_file,
)  # one implementation; re-exported for the bundle modules

__all__ = ["cache_root", "sha256_file", "sha256_text"]


def cache_root(override: Path | None = None) -> Path:
    """The bundle cache: an explicit path, else $AS2D_BUNDLE_CACHE, else $XDG_CACHE_HOME/as2d/bundle."""
    if override is not None:
        return Path(override)
    env = os.environ.get("AS2D_BUNDLE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "as2d" / "bundle"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class HashMemo:
    """SHA-256 of files remembered by (path, size, mtime_ns, inode), as git's index does,
    so a cache-hit build does not re-read ~200 MB of inputs. Saved in the cache."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._memo: dict[str, list] = {}
        if path is not None and path.is_file():
            try:
                self._memo = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                self._memo = {}

    def sha256(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        hit = self._memo.get(key)
        if hit is not None and hit[:3] == stamp:
            return hit[3]
        digest = sha256_file(path)
        self._memo[key] = [*stamp, digest]
        return digest

    def save(self) -> None:
        if self.path is not None:
            self._memo = {
                k: v for k, v in self._memo.items() if os.path.exists(k)
            }  # forget deleted files
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(self._memo))
            tmp.replace(self.path)
