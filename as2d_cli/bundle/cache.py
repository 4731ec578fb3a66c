"""Where the builder keeps downloads and finished bundles (~/.cache/as2d/bundle)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root(override: Path | None = None) -> Path:
    """The bundle cache: an explicit path, else $AS2D_BUNDLE_CACHE, else $XDG_CACHE_HOME/as2d/bundle."""
    if override is not None:
        return Path(override)
    env = os.environ.get("AS2D_BUNDLE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "as2d" / "bundle"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
