"""Launch the native runner from the host: locally over pipes, or on a device in file mode.

* :class:`LocalRunner` keeps one ``python -m native.runner`` process with models loaded and
  exchanges JSON lines over its stdin/stdout.
* :class:`DeviceRunner` runs a batch of commands on a :class:`device_agents.base.Device`:
  it pushes the commands file (and the corpus windows the batch reads) into a per-run
  directory, starts the runner there with a :mod:`as2d_cli.launch.payload` strategy (the arm64
  bundle, or the runner payload on a device with Python), and pulls the events file back
  — so the same protocol works over ``adb shell`` and survives a slow or unplugged link.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from as2d_cli.errors import DeviceError
from as2d_cli.launch.payload import (
    Launcher,
    choose_launcher,
    push_audio,
    push_windows,
    windows_in,
)
from native.protocol import CORPUS_ENV, FILES_ENV

if TYPE_CHECKING:
    from as2d_cli.models.model_pair import ModelPair

TERMINAL = ("hello", "loaded", "result", "calibrated", "streamed", "error", "bye")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RunnerError(DeviceError):
    """The runner reported an error or died."""


def check(ev: dict[str, Any]) -> dict[str, Any]:
    if ev.get("event") == "error":
        raise RunnerError(f"runner: {ev.get('message')}")
    return ev


class RunnerHandle(ABC):
    @abstractmethod
    def call(
        self, cmd: dict[str, Any], on_event: Callable[[dict], None] | None = None
    ) -> dict[str, Any]:
        """Send one command; return its terminal event (raising on an ``error`` event)."""

    def batch(self, cmds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [self.call(c) for c in cmds]

    def close(self) -> None:  # noqa: B027 - a hook: a handle may hold nothing to close
        pass

    def abort(self) -> None:  # noqa: B027 - a hook: some runners cannot be stopped
        """Stop the command in flight at once (from another thread); the handle is then
        unusable. Runners that cannot be stopped from outside finish the command."""

    def __enter__(self) -> RunnerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalRunner(RunnerHandle):
    """A runner process on this host, spoken to over pipes."""

    def __init__(
        self, python: str | None = None, env: dict[str, str] | None = None, timeout_s: float = 600.0
    ) -> None:
        full_env = {**os.environ, **(env or {})}
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(PROJECT_ROOT), full_env.get("PYTHONPATH")])
        )
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "native.runner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            env=full_env,
            cwd=str(PROJECT_ROOT),
        )
        self._stderr: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def call(
        self, cmd: dict[str, Any], on_event: Callable[[dict], None] | None = None
    ) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is not None:
            raise RunnerError(
                f"the runner exited ({self.proc.returncode}): {''.join(self._stderr[-3:]).strip()}"
            )
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RunnerError(
                    f"the runner died during {cmd.get('op')!r}: {''.join(self._stderr[-3:]).strip()}"
                )
            ev = json.loads(line)
            if on_event is not None:
                on_event(ev)
            if ev.get("event") in TERMINAL:
                return check(ev)

    def abort(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # the pending call() then fails: the runner died

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op":"quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, BrokenPipeError):
                self.proc.kill()


class DeviceRunner(RunnerHandle):
    """Runs command batches on a device in file mode (push commands, run, pull events)."""

    def __init__(self, device: Any, launcher: Launcher, deadline_s: float = 1800.0) -> None:
        self.device = device
        self.launcher = launcher  # launch.payload: how python starts on this device
        self.deadline_s = deadline_s
        # With a period (seconds), a batch's events reach ``on_event`` while it runs: the
        # events file is read back that often (a stream's live view); None: at its end.
        self.follow_s: float | None = None
        self._prelude: list[dict[str, Any]] = []

    def set_prelude(self, cmds: Sequence[dict[str, Any]]) -> None:
        """Commands (hello, load) sent at the start of every batch."""
        self._prelude = list(cmds)

    def call(
        self, cmd: dict[str, Any], on_event: Callable[[dict], None] | None = None
    ) -> dict[str, Any]:
        return self.batch([cmd], on_event)[-1]

    def batch(
        self, cmds: Sequence[dict[str, Any]], on_event: Callable[[dict], None] | None = None
    ) -> list[dict[str, Any]]:
        all_cmds = [*self._prelude, *cmds, {"op": "quit"}]
        with tempfile.TemporaryDirectory() as tmp, self.device.run_dir("runner") as rd:
            all_cmds = push_audio(self.device, rd, all_cmds)  # a stream's --audio file
            local_in = Path(tmp) / "commands.jsonl"
            local_in.write_text("".join(json.dumps(c) + "\n" for c in all_cmds), encoding="utf-8")
            remote_in, remote_out = f"{rd}/commands.jsonl", f"{rd}/events.jsonl"
            self.device.push(local_in, remote_in)
            env: dict[str, str] = {FILES_ENV: rd}
            windows = windows_in(all_cmds)
            if windows:  # only the windows this batch reads
                env[CORPUS_ENV] = push_windows(self.device, rd, windows)
            line = self.launcher.command(
                ["-m", "native.runner", "--commands", remote_in, "--out", remote_out], rd, env
            )
            follower = None
            if on_event is not None and self.follow_s:
                follower = _Follower(self.device, remote_out, len(self._prelude), on_event)
                follower.start(self.follow_s)
            try:
                res = self.device.shell(line, deadline_s=self.deadline_s)
            finally:
                if follower is not None:
                    follower.stop()
            local_out = Path(tmp) / "events.jsonl"
            try:
                self.device.pull(remote_out, local_out)
            except DeviceError as exc:
                raise RunnerError(
                    f"{self.device.serial}: the runner wrote no events ({exc}); "
                    f"its output: {res.stdout[-300:]}{res.stderr[-300:]}"
                ) from None
            events = [
                json.loads(x)
                for x in local_out.read_text(encoding="utf-8").splitlines()
                if x.strip()
            ]
        n_pre = len(self._prelude)
        delivered = 0 if follower is None else follower.delivered  # handed on while running
        terminal: list[dict[str, Any]] = []
        for i, e in enumerate(events):
            is_terminal = e.get("event") in TERMINAL and e.get("event") != "bye"
            if (
                i >= delivered
                and len(terminal) >= n_pre
                and on_event is not None
                and e.get("event") != "bye"
            ):
                on_event(e)
            if is_terminal:
                terminal.append(check(e))
        if len(terminal) < n_pre + len(cmds):
            raise RunnerError(
                f"{self.device.serial}: the runner stopped after {len(terminal)} of "
                f"{n_pre + len(cmds)} commands"
            )
        return terminal[n_pre:]


class _Follower:
    """Reads a running batch's events file back every ``period`` seconds and hands each
    new whole line after the prelude to ``on_event``, in order (once each: ``delivered``
    counts the events it has seen; the batch's final pass hands on only later ones)."""

    def __init__(
        self, device: Any, path: str, n_pre: int, on_event: Callable[[dict], None]
    ) -> None:
        self.device = device
        self.path = path
        self.n_pre = n_pre
        self.on_event = on_event
        self.delivered = 0
        self._terminal = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, period: float) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(period,), name="as2d-follow", daemon=True
        )
        self._thread.start()

    def _run(self, period: float) -> None:
        while not self._stop.wait(period):
            try:
                res = self.device.shell(["cat", self.path], deadline_s=max(10.0, period * 5))
                whole = res.stdout[: res.stdout.rfind("\n") + 1].splitlines()
                events = [json.loads(x) for x in whole if x.strip()]
                for e in events[self.delivered :]:
                    if self._terminal >= self.n_pre and e.get("event") != "bye":
                        self.on_event(e)
                    if e.get("event") in TERMINAL and e.get("event") != "bye":
                        self._terminal += 1
                    self.delivered += 1
            except Exception:  # noqa: BLE001 - following is a convenience; the final pass is the record
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def open_runner(
    device: Any,
    pair: ModelPair | None = None,
    *,
    target_cores: list[int] | None = None,
    producer_cores: list[int] | None = None,
    launcher: Launcher | None = None,
) -> RunnerHandle:
    """A runner for ``device`` with the model ``pair`` loaded (the command's, with its prompt
    settings, docs/models.md; None: the bundled pair): pipes locally; on a phone, file-mode
    batches started by ``launcher`` (default: :func:`as2d_cli.launch.payload.choose_launcher`),
    which carries the pair."""
    load = {
        "op": "load",
        "models": None if pair is None or pair.bundled else str(pair.directory.resolve()),
        "target_cores": target_cores,
        "producer_cores": producer_cores,
        "prompt": None if pair is None or pair.prompt.empty else pair.prompt.to_wire(),
    }
    if getattr(device, "kind", "local") == "local":
        local = LocalRunner()
        local.call({"op": "hello"})
        local.call(load)
        return local
    launcher = launcher or choose_launcher(device, pair)
    load["models"] = launcher.models  # the device's copy of the pair
    remote = DeviceRunner(device, launcher)
    remote.set_prelude([{"op": "hello"}, load])
    return remote


def default_cores() -> tuple[list[int] | None, list[int] | None]:
    """Target on the first allowed CPU, producer on the second (None when only one)."""
    from device_agents.affinity import local_default

    return local_default()
