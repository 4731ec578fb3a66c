"""What every Hugging Face ONNX export folder shares, whatever its model kind: its JSON
side files, its file variants (``_quantized``, ``_int8``, ``_q4``, ``_fp16``…) and the
external-data files large exports keep their weights in."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from as2d_cli.errors import UserError
from as2d_cli.formats.common import read_json


def export_json(path: Path, what: str, kind: str, hint: str) -> dict:
    """A side file's JSON object, or one line naming the file, what it holds and ``hint``."""
    data = read_json(
        path, f"{path.parent} is not {kind}: {path.name} ({what}) is missing; {hint}", hint
    )
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a JSON object; {hint}")
    return data


def file_variants(onnx_dir: Path, stem: str) -> list[str]:
    """The variants of ``stem``.onnx in ``onnx_dir``: "" for the plain file, else the suffix."""
    out = []
    for p in sorted(onnx_dir.glob(f"{stem}*.onnx")):
        m = re.fullmatch(rf"{stem}(?:_(\w+))?\.onnx", p.name)
        if m:
            out.append(m.group(1) or "")
    return out


def variant_folder(
    directory: Path, stem: str, variant: str | None, hint: str
) -> tuple[str, Path, str]:
    """Where an export keeps its ONNX files and which of them ``variant`` (None: the plain
    files) names: (``flat`` | ``onnx``, that folder, the file-name suffix). Refuses an export
    without ``stem``.onnx, and a variant it lacks (naming those it has), in one line."""
    if file_variants(directory, stem):
        layout, onnx_dir = "flat", directory
    elif (directory / "onnx").is_dir() and file_variants(directory / "onnx", stem):
        layout, onnx_dir = "onnx", directory / "onnx"
    else:
        raise UserError(
            f"{directory} has no {stem}.onnx (neither beside config.json nor under onnx/); {hint}"
        )
    have = file_variants(onnx_dir, stem)
    suffix = f"_{variant}" if variant else ""
    if (variant or "") not in have:
        names = ", ".join(v or "(plain)" for v in have)
        raise UserError(
            f"{onnx_dir} has no {stem}{suffix}.onnx; its variants are: {names} (choose one with "
            "--variant, or --drafter-variant for the drafter)"
        )
    return layout, onnx_dir, suffix


def external_data(files: Iterable[Path | None]) -> list[Path]:
    """The ONNX files' external-data files (``model.onnx_data``, or ``model.onnx.data``)."""
    return [
        f.parent / name
        for f in files
        if f is not None
        for name in (f"{f.name}_data", f"{f.name}.data")
        if (f.parent / name).is_file()
    ]
