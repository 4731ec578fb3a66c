"""adb's shell protocol v2 framing: [kind:1][length:4 LE][data], kinds 1 stdout, 2 stderr, 3 exit."""

from __future__ import annotations

import struct

STDOUT, STDERR, EXIT = 1, 2, 3


def take_packets(buf: bytearray) -> list[tuple[int, bytes]]:
    """Remove and return every complete packet at the start of ``buf`` (a partial one stays)."""
    out: list[tuple[int, bytes]] = []
    while len(buf) >= 5:
        kind, length = buf[0], struct.unpack("<I", bytes(buf[1:5]))[0]
        if len(buf) < 5 + length:
            break
        out.append((kind, bytes(buf[5 : 5 + length])))
        del buf[: 5 + length]
    return out
