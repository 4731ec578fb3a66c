"""A thread-safe in-memory byte pipe: the stdin of emulated commands."""

from __future__ import annotations

import threading


class StreamClosed(Exception):
    """The host closed the adb stream (or the connection dropped)."""


class Pipe:
    """Unbounded byte pipe; readers block until data or EOF (``close``)."""

    def __init__(self, data: bytes = b"", closed: bool = False) -> None:
        self._buf = bytearray(data)
        self._eof = closed
        self._cond = threading.Condition()

    def write(self, data: bytes) -> None:
        with self._cond:
            if self._eof:
                return
            self._buf += data
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def read(self, n: int = -1, timeout: float | None = None) -> bytes:
        """Up to n bytes (all until EOF when n < 0); b'' at EOF."""
        with self._cond:
            if n < 0:
                self._cond.wait_for(lambda: self._eof, timeout)
                data = bytes(self._buf)
                self._buf.clear()
                return data
            self._cond.wait_for(lambda: self._buf or self._eof, timeout)
            data = bytes(self._buf[:n])
            del self._buf[:n]
            return data

    def read1(self, timeout: float | None = None) -> bytes:
        return self.read(1 << 16, timeout)

    def readline(self) -> bytes:
        with self._cond:
            self._cond.wait_for(lambda: b"\n" in self._buf or self._eof)
            idx = self._buf.find(b"\n")
            end = idx + 1 if idx >= 0 else len(self._buf)
            data = bytes(self._buf[:end])
            del self._buf[:end]
            return data

    @property
    def at_eof(self) -> bool:
        with self._cond:
            return self._eof and not self._buf
