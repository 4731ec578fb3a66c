"""Long-running programs on a device with streamed stdin/stdout (the native runner's line
protocol): ``Device.spawn(argv, affinity)`` returns a :class:`DeviceProcess`. On a phone
this is one ``shell,v2:`` stream; closing it ends the program."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import threading
import time
from typing import IO

from device_agents.base import DeviceDisconnected, DeviceTimeout, ShellResult
from device_agents.shell_v2 import EXIT, STDERR, STDOUT, take_packets


class DeviceProcess:
    """Common part: buffers stdout by line and stderr whole; subclasses feed them."""

    def __init__(self, serial: str, command: str) -> None:
        self.serial = serial
        self.command = command
        self._cond = threading.Condition()
        self._out = bytearray()
        self._err = bytearray()
        self._eof = False
        self._lost: str | None = None
        self.exit_code: int | None = None
        self._start = time.monotonic()

    # -- fed by reader threads ----------------------------------------------------------
    def _feed_out(self, data: bytes) -> None:
        with self._cond:
            self._out += data
            self._cond.notify_all()

    def _feed_err(self, data: bytes) -> None:
        with self._cond:
            self._err += data

    def _finish(self, code: int | None, lost: str | None = None) -> None:
        with self._cond:
            self.exit_code = code
            self._lost = lost
            self._eof = True
            self._cond.notify_all()

    # -- the caller's side ---------------------------------------------------------------
    def partial(self) -> ShellResult:
        with self._cond:
            return ShellResult(
                self.command,
                self.exit_code,
                self._out.decode("utf-8", "replace"),
                self._err.decode("utf-8", "replace"),
                time.monotonic() - self._start,
            )

    def read_line(self, timeout: float | None = None) -> str | None:
        """The next stdout line (without newline); None at end of output. Raises
        DeviceTimeout after ``timeout`` s without a line, DeviceDisconnected if the
        device went away."""
        with self._cond:
            ok = self._cond.wait_for(lambda: b"\n" in self._out or self._eof, timeout)
            if not ok:
                raise DeviceTimeout(
                    f"{self.serial}: no output line from {self.command[:60]!r} within "
                    f"{timeout:g} s",
                    self.partial_unlocked(),
                )
            idx = self._out.find(b"\n")
            if idx >= 0:
                line = bytes(self._out[:idx])
                del self._out[: idx + 1]
                return line.decode("utf-8", "replace")
            if self._lost:
                raise DeviceDisconnected(self._lost, self.partial_unlocked())
            if self._out:
                line = bytes(self._out)
                self._out.clear()
                return line.decode("utf-8", "replace")
            return None

    def partial_unlocked(self) -> ShellResult:
        return ShellResult(
            self.command,
            self.exit_code,
            self._out.decode("utf-8", "replace"),
            self._err.decode("utf-8", "replace"),
            time.monotonic() - self._start,
        )

    def wait(self, deadline_s: float) -> int:
        """Exit status; DeviceTimeout (program killed) if not done within ``deadline_s``."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._eof, deadline_s)
        if not done:
            self.kill()
            raise DeviceTimeout(
                f"{self.serial}: {self.command[:60]!r} did not finish within {deadline_s:g} s "
                f"(deadline); it was stopped, output so far is kept",
                self.partial(),
            )
        if self._lost:
            raise DeviceDisconnected(self._lost, self.partial())
        assert self.exit_code is not None
        return self.exit_code

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def close_stdin(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> DeviceProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class LocalProcess(DeviceProcess):
    def __init__(self, argv: list[str], cpus: set[int] | None, command: str) -> None:
        super().__init__("local", command)
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        threading.Thread(
            target=self._pump, args=(self._proc.stdout, self._feed_out), daemon=True
        ).start()
        self._err_thread = threading.Thread(
            target=self._pump, args=(self._proc.stderr, self._feed_err), daemon=True
        )
        self._err_thread.start()

    def _pump(self, src: IO[bytes], feed) -> None:  # type: ignore[no-untyped-def]
        while chunk := src.read1(65536):  # type: ignore[attr-defined]
            feed(chunk)
        if feed == self._feed_out:
            code = self._proc.wait()
            self._err_thread.join(timeout=2)
            self._finish(128 - code if code < 0 else code)

    def write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def close_stdin(self) -> None:
        if self._proc.stdin and not self._proc.stdin.closed:
            self._proc.stdin.close()

    def kill(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class AdbProcess(DeviceProcess):
    """One shell v2 stream: packets 0 stdin, 1 stdout, 2 stderr, 3 exit, 4 close stdin."""

    def __init__(self, serial: str, command: str, sock: socket.socket, on_close) -> None:  # type: ignore[no-untyped-def]
        super().__init__(serial, command)
        self._sock = sock
        self._close_conn = on_close
        self._closed = False
        self._send_lock = threading.Lock()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        buf = bytearray()
        try:
            self._sock.settimeout(None)
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    self._finish(
                        None,
                        f"phone {self.serial} disconnected while running {self.command[:60]!r}; "
                        f"output so far is kept -- check the cable and `as2d devices`",
                    )
                    return
                buf += chunk
                for kind, data in take_packets(buf):
                    if kind == STDOUT:
                        self._feed_out(data)
                    elif kind == STDERR:
                        self._feed_err(data)
                    elif kind == EXIT:
                        self._finish(data[0] if data else 255)
                        self._on_close()
                        return
        except OSError as exc:
            if not self._eof:
                self._finish(
                    None,
                    f"phone {self.serial} disconnected while running {self.command[:60]!r} ({exc}); "
                    f"output so far is kept",
                )

    def _on_close(self) -> None:
        with self._send_lock:  # reader and caller may both close; adbutils' close is not idempotent
            if self._closed:
                return
            self._closed = True
        try:
            self._close_conn()
        except (OSError, AttributeError):
            pass

    def _send(self, kind: int, data: bytes = b"") -> None:
        with self._send_lock:
            try:
                self._sock.sendall(bytes([kind]) + struct.pack("<I", len(data)) + data)
            except OSError as exc:
                raise DeviceDisconnected(
                    f"phone {self.serial}: cannot write to {self.command[:60]!r} ({exc})",
                    self.partial(),
                ) from None

    def write(self, data: bytes) -> None:
        for start in range(0, len(data), 65536):
            self._send(0, data[start : start + 65536])

    def close_stdin(self) -> None:
        self._send(4)

    def kill(self) -> None:
        """Close the stream; the phone ends the program."""
        if not self._eof:
            self._finish(137)  # as a killed process reports it (128 + SIGKILL)
        self._on_close()
