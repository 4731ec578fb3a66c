"""Running the outside tools the builder needs (apt-get, dpkg, pip) with one-line errors."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from as2d_cli.errors import UserError


def require_tool(name: str, hint: str) -> str:
    """The absolute path of a program on PATH, or a UserError that says how to get it."""
    path = shutil.which(name)
    if path is None:
        raise UserError(f"{name} not found on PATH; {hint}")
    return path


def run_tool(
    argv: Sequence[str], *, what: str, hint: str, cwd: Path | None = None, timeout: float = 900
) -> str:
    """Run a tool, returning stdout; on failure raise a UserError naming the last error line."""
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise UserError(f"{argv[0]} not found; {hint}") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} timed out after {timeout:.0f} s; {hint}") from None
    if proc.returncode != 0:
        raise UserError(f"{what} failed: {last_error_line(proc.stderr or proc.stdout)}; {hint}")
    return proc.stdout


def last_error_line(text: str) -> str:
    """The most telling line of a tool's output: the last one starting with E:/ERROR, else the last."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("E:", "ERROR", "error")):
            return ln
    return lines[-1] if lines else "no output"
