"""A phone over adb (adbutils and the adb server). The emulated phone is reached the same
way: it is just another serial on the adb server."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from as2d_cli.errors import DeviceError, UserError

DEFAULT_ADB_PORT = 5037


def adb_port() -> int:
    text = os.environ.get("ANDROID_ADB_SERVER_PORT", str(DEFAULT_ADB_PORT))
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UserError(
            f"ANDROID_ADB_SERVER_PORT={text!r} is not a TCP port; unset it or set a number like 5037"
        )
    return int(text)


adb_port()  # adbutils reads the variable when imported and fails on a bad one with a bare ValueError

import adbutils  # noqa: E402
from adbutils.errors import AdbError  # noqa: E402

from device_agents.base import (
    CPU_DIR,
    RUN_ROOT,
    Device,
    DeviceDisconnected,
    DeviceTimeout,
    DeviceUnavailable,
    Fact,
    Facts,
    ShellResult,
    mask_hex,
    quote_command,
)
from device_agents.shell_v2 import EXIT, STDERR, STDOUT, take_packets

if TYPE_CHECKING:
    from device_agents.process import AdbProcess


def adb_client(port: int | None = None) -> adbutils.AdbClient:
    return adbutils.AdbClient(host="127.0.0.1", port=port or adb_port(), socket_timeout=10)


@dataclass(frozen=True)
class Attached:
    serial: str
    state: str  # device | unauthorized | offline | ...


def _server_up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def list_attached(port: int | None = None) -> list[Attached]:
    """Every serial the adb server knows, with its state. Never starts a server: when none
    runs there is nothing attached (and we say so)."""
    port = port or adb_port()
    if not _server_up(port):
        return []
    try:
        return [Attached(d.serial, d.state) for d in adb_client(port).list()]
    except (AdbError, OSError) as exc:
        raise DeviceError(
            f"the adb server on port {port} did not answer ({exc}); restart it with "
            f"`adb kill-server && adb start-server`"
        ) from None


STATE_ADVICE = {
    "unauthorized": "unlock the phone and accept the 'Allow USB debugging?' prompt (tick 'Always allow'), then retry",
    "offline": "replug the cable (or run `adb reconnect offline`); if it stays offline, toggle USB debugging",
    "no permissions": "add a udev rule for the phone's USB vendor id (see docs/devices.md) and replug",
    "authorizing": "wait a moment and retry",
    "connecting": "wait a moment and retry",
}


def _state_error(serial: str, state: str) -> DeviceUnavailable:
    advice = STATE_ADVICE.get(state, "check the cable and `adb devices`")
    return DeviceUnavailable(f"phone {serial} is {state}: {advice}")


class AdbPhone(Device):
    kind = "adb"

    def __init__(self, serial: str, port: int | None = None) -> None:
        self.serial = serial
        self.port = port or adb_port()
        self._client = adb_client(self.port)
        self._dev = self._client.device(serial)

    # -- transport -----------------------------------------------------------------------
    def _open(self, service: str, deadline: float) -> adbutils.AdbConnection:
        try:
            # host:tport:serial (adb >= 1.0.41) switches to the device in one request;
            # adbutils' open_transport asks the server version first on every call.
            conn = self._client.make_connection(timeout=max(0.1, deadline - time.monotonic()))
            conn.send_command(f"host:tport:serial:{self.serial}")
            conn.check_okay()
            conn.read_exact(8)  # the transport id
            conn.send_command(service)
            conn.check_okay()
            return conn
        except AdbError as exc:
            raise self._translate(exc) from None
        except (OSError, EOFError) as exc:
            raise DeviceDisconnected(
                f"phone {self.serial}: adb server connection failed ({exc}); check `adb devices`"
            ) from None

    def _translate(self, exc: AdbError) -> DeviceError:
        text = str(exc)
        for state in ("unauthorized", "offline", "no permissions", "authorizing", "connecting"):
            if state in text:
                return _state_error(self.serial, state)
        if "not found" in text:
            return DeviceUnavailable(
                f"phone {self.serial} is not attached any more: replug it or "
                f"`adb connect` it again, then check `as2d devices`"
            )
        return DeviceError(f"phone {self.serial}: adb refused the request ({text})")

    def shell(self, command: str | Sequence[str], deadline_s: float = 30.0) -> ShellResult:
        cmd = quote_command(command)
        start = time.monotonic()
        deadline = start + deadline_s
        conn = self._open(f"shell,v2:{cmd}", deadline)
        out, err = bytearray(), bytearray()
        buf = bytearray()
        exit_code: int | None = None

        def partial() -> ShellResult:
            return ShellResult(
                cmd,
                None,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace"),
                time.monotonic() - start,
            )

        try:
            sock = conn.conn
            sock.sendall(
                bytes([4]) + struct.pack("<I", 0)
            )  # close stdin: commands see EOF, never wait on it
            while exit_code is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError()
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    raise DeviceDisconnected(
                        f"phone {self.serial} disconnected while running {cmd[:80]!r} "
                        f"after {time.monotonic() - start:.1f} s; output so far is kept -- "
                        f"check the cable and `as2d devices`",
                        partial(),
                    )
                buf += chunk
                for kind, data in take_packets(buf):
                    if kind == STDOUT:
                        out += data
                    elif kind == STDERR:
                        err += data
                    elif kind == EXIT:
                        exit_code = data[0] if data else 255
        except TimeoutError:
            raise DeviceTimeout(
                f"phone {self.serial}: {cmd[:80]!r} did not finish within {deadline_s:g} s "
                f"(deadline); output so far is kept -- the device may be stalled, "
                f"check it with `as2d devices`",
                partial(),
            ) from None
        except OSError as exc:
            raise DeviceDisconnected(
                f"phone {self.serial} disconnected while running {cmd[:80]!r} ({exc}); "
                f"output so far is kept",
                partial(),
            ) from None
        finally:
            try:  # closing the stream ends the command on the phone (adbutils' close() sleeps 10 ms)
                conn.conn.close()
            except OSError:
                pass
        return ShellResult(
            cmd,
            exit_code,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            time.monotonic() - start,
        )

    def read_files(self, paths: Sequence[str], deadline_s: float = 10.0) -> dict[str, str | None]:
        # One round trip: grep -H prints 'path:line' for every line of every readable file.
        res = self.shell(["grep", "-H", "", *paths], deadline_s)
        found: dict[str, list[str]] = {}
        for line in res.stdout.splitlines():
            for p in paths:
                if line.startswith(p + ":"):
                    found.setdefault(p, []).append(line[len(p) + 1 :])
                    break
        return {p: ("\n".join(found[p]) + "\n" if p in found else None) for p in paths}

    def list_dir(self, path: str, deadline_s: float = 10.0) -> list[str]:
        res = self.shell(["ls", path], deadline_s)
        return res.stdout.split() if res.exit_code == 0 else []

    def run_root(self) -> str:
        return RUN_ROOT

    def push(self, local: Path, remote: str, deadline_s: float = 120.0) -> None:
        target = self._check_remote(remote)
        self._sync(
            lambda: self._dev.sync.push(str(local), target, mode=0o755),
            f"push {local} -> {target}",
            deadline_s,
        )

    def pull(self, remote: str, local: Path, deadline_s: float = 120.0) -> None:
        tmp = local.with_name(local.name + ".part")
        try:
            self._sync(lambda: self._dev.sync.pull_file(remote, tmp), f"pull {remote}", deadline_s)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed pull leaves nothing behind
            raise
        tmp.replace(local)

    def _sync(self, action, what: str, deadline_s: float) -> None:  # type: ignore[no-untyped-def]
        import threading

        box: dict[str, BaseException] = {}

        def run() -> None:
            try:
                action()
            except BaseException as exc:  # noqa: BLE001 - re-raised below in the caller's thread
                box["exc"] = exc

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(deadline_s)
        if t.is_alive():
            raise DeviceTimeout(
                f"phone {self.serial}: {what} did not finish within {deadline_s:g} s"
            )
        exc = box.get("exc")
        if exc is None:
            return
        if isinstance(exc, AdbError):
            text = str(exc)
            if "does not exist" in text or "No such file" in text:
                raise DeviceError(f"phone {self.serial}: {what} failed: {text}") from None
            raise self._translate(exc) from None
        if isinstance(exc, (OSError, EOFError, struct.error, AssertionError)):
            raise DeviceDisconnected(
                f"phone {self.serial} disconnected during {what}: check the cable"
            ) from None
        raise exc

    def run(
        self, argv: Sequence[str], affinity: set[int] | None = None, deadline_s: float = 60.0
    ) -> ShellResult:
        prefix = ["taskset", mask_hex(affinity)] if affinity else []
        return self.shell([*prefix, *argv], deadline_s)

    def spawn(self, argv: Sequence[str], affinity: set[int] | None = None) -> AdbProcess:
        from device_agents.process import AdbProcess

        prefix = ["taskset", mask_hex(affinity)] if affinity else []
        cmd = quote_command([*prefix, *argv])
        conn = self._open(f"shell,v2:{cmd}", time.monotonic() + 10)
        return AdbProcess(self.serial, cmd, conn.conn, conn.close)

    # -- facts ---------------------------------------------------------------------------
    def getprops(self) -> dict[str, str]:
        res = self.shell(["getprop"], 15).check("getprop")
        props: dict[str, str] = {}
        for line in res.stdout.splitlines():
            if line.startswith("[") and "]: [" in line:
                k, _, v = line[1:].partition("]: [")
                props[k] = v.rstrip("]")
        return props

    def facts(self) -> Facts:
        props = self.getprops()
        cpus = self.cpus()
        max_paths = [f"{CPU_DIR}/cpu{c}/cpufreq/cpuinfo_max_freq" for c in cpus]
        gpu_path, mem_path = "/sys/class/kgsl/kgsl-3d0/gpu_model", "/proc/meminfo"
        files = self.read_files([*max_paths, gpu_path, mem_path])

        def prop(name: str, key: str) -> Fact:
            v = props.get(key)
            return (
                Fact(v, f"getprop {key}")
                if v
                else Fact(None, f"unavailable: getprop {key} is empty")
            )

        per_core = {c: int(f.strip()) / 1e6 for c, p in zip(cpus, max_paths) if (f := files.get(p))}
        v: dict[str, Fact] = {
            "model_id": prop("model_id", "ro.product.model"),
            "marketing_name": prop("marketing_name", "ro.product.marketname"),
            "soc": (
                Fact(
                    f"{props.get('ro.soc.manufacturer', '')} {props['ro.soc.model']}".strip(),
                    "getprop ro.soc.model",
                )
                if props.get("ro.soc.model")
                else prop("soc", "ro.board.platform")
            ),
            "cpu_cores": Fact(len(cpus), f"{CPU_DIR}/possible"),
            "cpu_max_ghz_by_core": (
                Fact({str(c): round(g, 4) for c, g in per_core.items()}, "cpufreq/cpuinfo_max_freq")
                if per_core
                else Fact(None, "unavailable: cpuinfo_max_freq unreadable")
            ),
            "cpu_peak_ghz": (
                Fact(round(max(per_core.values()), 4), "max cpufreq/cpuinfo_max_freq")
                if per_core
                else Fact(None, "unavailable: cpuinfo_max_freq unreadable")
            ),
            "gpu": (
                Fact(gpu.strip(), gpu_path)
                if (gpu := files.get(gpu_path))
                else Fact(None, f"unavailable: {gpu_path} unreadable (not a Qualcomm Adreno GPU?)")
            ),
            "ram_gib": _mem_fact(files.get(mem_path)),
            "android_version": prop("android_version", "ro.build.version.release"),
            "api_level": (
                Fact(int(props["ro.build.version.sdk"]), "getprop ro.build.version.sdk")
                if props.get("ro.build.version.sdk", "").isdigit()
                else Fact(None, "unavailable: getprop ro.build.version.sdk is empty")
            ),
            "build": prop("build", "ro.build.version.incremental"),
            "security_patch": prop("security_patch", "ro.build.version.security_patch"),
            "opencl": Fact(
                None, "unavailable: reported by the native runner when it opens an OpenCL context"
            ),
        }
        return Facts(v)


def _mem_fact(meminfo: str | None) -> Fact:
    for line in (meminfo or "").splitlines():
        if line.startswith("MemTotal:"):
            kb = int(line.split()[1])
            return Fact(round(kb / 1024 / 1024, 2), "/proc/meminfo MemTotal")
    return Fact(None, "unavailable: /proc/meminfo has no MemTotal")
