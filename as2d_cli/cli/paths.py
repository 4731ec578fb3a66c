"""Checks of the paths a user passes, made before any work starts: a folder where a
folder is expected, a file where a file is, and a place where something can be created.

Each check raises a UserError naming the option and the path; ``folder_out`` and friends
also exist as option callbacks (``*_option``) so the check runs while the command line is
parsed. Any OSError that still escapes is printed by ``main()`` as one line naming the path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from as2d_cli.errors import UserError


def _blocker(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` when it is not a folder (nothing can be
    created under it), else None."""
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            return None if parent.is_dir() else parent
    return None


def _unwritable(path: Path) -> Path | None:
    """The nearest existing folder at or above ``path`` when this process cannot create
    entries in it, else None."""
    for p in (path, *path.parents):
        if p.is_dir():
            return None if os.access(p, os.W_OK | os.X_OK) else p
    return None


def _creatable(path: Path, option: str, what: str) -> None:
    blocker = _blocker(path)
    if blocker is not None:
        raise UserError(
            f"{option} {path}: {blocker} is a file, not a folder, so no {what} can be made under it; "
            f"pass a path under a folder"
        )
    locked = _unwritable(path)
    if locked is not None:
        raise UserError(
            f"{option} {path}: {locked} is not writable; pass a {what} in a folder you can write to"
        )


def folder_out(path: Path, option: str) -> Path:
    """A folder the command writes into, created when missing."""
    if path.exists() and not path.is_dir():
        raise UserError(
            f"{option} {path} is a file, not a folder; pass a folder (it is created if missing)"
        )
    _creatable(path, option, "folder")
    return path


def _new(path: Path, option: str, what: str, it: str) -> Path:
    """``path`` must not exist yet (never overwritten) and must be creatable."""
    if path.exists():
        raise UserError(
            f"{option} {path} already exists and is never overwritten; pass another {option} "
            f"or remove {it} first"
        )
    _creatable(path, option, what)
    return path


def folder_new(path: Path, option: str) -> Path:
    """A folder the command creates (never overwritten: it must not exist yet)."""
    return _new(path, option, "folder", "it")


def file_out(path: Path, option: str) -> Path:
    """A file the command creates (never overwritten: it must not exist yet)."""
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder; pass the path of a new file")
    return _new(path, option, "file", "that file")


def file_target(path: Path, option: str) -> Path:
    """A file the command writes (whether an existing one may be replaced is the
    command's rule)."""
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder; pass the path of a file")
    _creatable(path, option, "file")
    return path


def file_or_folder_out(path: Path, option: str) -> Path:
    """A file to create, or a folder to create it in."""
    if not path.is_dir():
        _creatable(path, option, "file")
    return path


def folder_in(path: Path, option: str) -> Path:
    """An existing folder the command reads."""
    if not path.exists():
        raise UserError(f"{option} {path}: no such folder; check the path")
    if not path.is_dir():
        raise UserError(f"{option} {path} is a file, not a folder; pass the folder")
    return path


def file_in(path: Path, option: str) -> Path:
    """An existing file the command reads."""
    if not path.exists():
        raise UserError(f"{option} {path}: no such file; check the path")
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder, not a file; pass the file")
    return path


def _callback(check: Callable[[Path, str], Path]) -> Callable[..., Any]:
    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is None:
            return value
        is_option = getattr(param, "param_type_name", "") == "option" and param.opts
        name = max(param.opts, key=len) if is_option else str(param.name).upper()
        try:
            for v in value if isinstance(value, (list, tuple)) else (value,):
                check(Path(v), name)
        except UserError as exc:
            # typer types CallbackParam as a plain click Parameter, yet hands callbacks its
            # own TyperOption/TyperArgument, which is what BadParameter expects.
            raise typer.BadParameter(
                str(exc).removeprefix(f"{name} "),
                ctx=ctx,
                param=param,  # type: ignore[arg-type]
            ) from None
        return value

    return callback


folder_out_option = _callback(folder_out)
folder_new_option = _callback(folder_new)
file_out_option = _callback(file_out)
file_target_option = _callback(file_target)
file_or_folder_out_option = _callback(file_or_folder_out)
folder_in_option = _callback(folder_in)
file_in_option = _callback(file_in)
