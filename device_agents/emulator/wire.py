"""The adb transport message format (AOSP adb protocol.txt): a 24-byte little-endian header
(command, arg0, arg1, data length, data checksum, magic = command ^ 0xffffffff) then the
payload."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

HEADER = struct.Struct("<6I")


def _cmd(name: bytes) -> int:
    return struct.unpack("<I", name)[0]


A_CNXN = _cmd(b"CNXN")
A_AUTH = _cmd(b"AUTH")
A_OPEN = _cmd(b"OPEN")
A_OKAY = _cmd(b"OKAY")
A_CLSE = _cmd(b"CLSE")
A_WRTE = _cmd(b"WRTE")
A_STLS = _cmd(b"STLS")

# Version 0x01000001 lets both sides skip payload checksums (Android 9+); we still send them.
A_VERSION = 0x01000001
# The largest payload the emulated phone announces in its CNXN (arg1) and accepts. adb's own
# MAX_PAYLOAD is 1 MiB (256 KiB before Android 9, 4 KiB for protocol v1); the adb server
# never sends more than the smaller of its own and the device's, so nothing legitimate is
# larger than this, before or after authentication.
MAX_PAYLOAD = 256 * 1024
_RECV_CHUNK = 64 * 1024  # never ask the kernel for more at once (recv(n) allocates n bytes)

AUTH_TOKEN = 1
AUTH_SIGNATURE = 2
AUTH_RSAPUBLICKEY = 3


@dataclass(frozen=True)
class Message:
    command: int
    arg0: int
    arg1: int
    data: bytes = b""

    @property
    def name(self) -> str:
        return struct.pack("<I", self.command).decode("ascii", "replace")


def encode(msg: Message) -> bytes:
    checksum = sum(msg.data) & 0xFFFFFFFF
    header = HEADER.pack(
        msg.command, msg.arg0, msg.arg1, len(msg.data), checksum, msg.command ^ 0xFFFFFFFF
    )
    return header + msg.data


class PayloadTooLarge(ConnectionError):
    """A header announced more payload than the limit; nothing of the payload was read."""

    def __init__(self, command: int, length: int, limit: int) -> None:
        name = struct.pack("<I", command).decode("ascii", "replace")
        super().__init__(
            f"{name!r} packet announces {length} bytes of payload, above the maximum of {limit}"
        )
        self.command = command
        self.length = length
        self.limit = limit


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), _RECV_CHUNK))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_message(sock: socket.socket, max_payload: int = MAX_PAYLOAD) -> Message | None:
    """Read one message; None when the peer closed the connection. A header announcing more
    than ``max_payload`` bytes raises :class:`PayloadTooLarge` before any payload is read."""
    head = _recv_exact(sock, HEADER.size)
    if head is None:
        return None
    command, arg0, arg1, length, _checksum, magic = HEADER.unpack(head)
    if magic != command ^ 0xFFFFFFFF:
        raise ConnectionError(f"bad adb magic for command {command:#x}")
    if length > max_payload:
        raise PayloadTooLarge(command, length, max_payload)
    data = b""
    if length:
        got = _recv_exact(sock, length)
        if got is None:
            return None
        data = got
    return Message(command, arg0, arg1, data)
