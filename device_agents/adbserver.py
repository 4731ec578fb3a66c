"""A private adb server: adbutils' bundled adb binary run in the foreground
(``adb -P PORT nodaemon server``) with its own HOME, so its RSA keys and state never touch
the user's server on 5037, and it is stopped by its own process id."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import adbutils

from as2d_cli.errors import DeviceError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class PrivateAdbServer:
    def __init__(self, port: int | None = None, home: Path | None = None) -> None:
        self.port = port or free_port()
        self._owned_home = home is None
        self.home = home or Path(tempfile.mkdtemp(prefix="as2d-adbhome-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ADB_VENDOR_KEYS", "ANDROID_ADB_SERVER_PORT")
        }
        env.update(
            HOME=str(self.home),
            ANDROID_USER_HOME=str(self.home / ".android"),
            ADB_MDNS="0",
            ADB_MDNS_AUTO_CONNECT="0",
            ADB_LIBUSB="0",
        )  # libusb start-up stalls the first reply by ~3 s
        return env

    def start(self, timeout: float = 10.0) -> PrivateAdbServer:
        (self.home / ".android").mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [adbutils.adb_path(), "-P", str(self.port), "nodaemon", "server"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DeviceError(
                    f"the private adb server on port {self.port} exited at start "
                    f"(code {self.proc.returncode}); is the port taken? pick another with --adb-port"
                )
            # Probe with a bare socket first: adbutils falls back to `adb start-server` on
            # the default port 5037 when it cannot connect, which must never happen here.
            if _listening(self.port):
                try:
                    self.client().server_version()
                    return self
                except Exception:
                    pass
            time.sleep(0.02)
        self.stop()
        raise DeviceError(
            f"the private adb server on port {self.port} did not answer within {timeout:.0f} s"
        )

    def client(self) -> adbutils.AdbClient:
        return adbutils.AdbClient(host="127.0.0.1", port=self.port, socket_timeout=10)

    def connect(self, serial: str, timeout: float = 5.0) -> str:
        """`adb connect SERIAL`; returns the server's reply."""
        return self.client().connect(serial, timeout=timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=3)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=3)
        if self._owned_home:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> PrivateAdbServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
