"""Just enough ELF reading to know a shared object's SONAME and DT_NEEDED entries.

The builder uses it to keep exactly the libraries the bundle's programs load (pruning)
and to refuse a bundle whose dependencies are not all inside it.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME = 0, 1, 5, 14
EM_AARCH64 = 183


@dataclass(frozen=True)
class ElfInfo:
    machine: int
    soname: str | None
    needed: tuple[str, ...]


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def read_elf(path: Path) -> ElfInfo:
    """Machine, SONAME and DT_NEEDED of a 64-bit little-endian ELF file."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _parse(path, data)


def _parse(path: Path, data: mmap.mmap) -> ElfInfo:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return ElfInfo(machine, None, ())
    entries: list[tuple[int, int]] = []
    off, size = dynamic
    for pos in range(off, off + size, 16):
        tag, val = struct.unpack_from("<qQ", data, pos)
        if tag == _DT_NULL:
            break
        entries.append((tag, val))
    strtab_vaddr = next((v for t, v in entries if t == _DT_STRTAB), None)
    if strtab_vaddr is None:
        return ElfInfo(machine, None, ())
    strtab = _vaddr_to_offset(loads, strtab_vaddr)

    def string(at: int) -> str:
        start = strtab + at
        return data[start : data.find(b"\0", start)].decode()

    soname = next((string(v) for t, v in entries if t == _DT_SONAME), None)
    needed = tuple(string(v) for t, v in entries if t == _DT_NEEDED)
    return ElfInfo(machine, soname, needed)


def _vaddr_to_offset(loads: list[tuple[int, int, int]], vaddr: int) -> int:
    for seg_vaddr, seg_off, seg_size in loads:
        if seg_vaddr <= vaddr < seg_vaddr + seg_size:
            return seg_off + (vaddr - seg_vaddr)
    return vaddr  # unmapped string tables are file offsets in practice
