"""Shared fixtures: a private adb server (own port, own HOME; stopped by process id) and
emulated phones connected to it with `adb connect`.

- ``adb_server``: one private adb server per test session (per xdist worker).
- ``emulated_phone``: one emulated Redmi K70 Pro per test module, connected to that server;
  ``.device()`` is an AdbPhone, ``.phone`` the ScriptedPhone (command table, faults),
  ``.serial``, ``.adb_port``, ``.env`` (ANDROID_ADB_SERVER_PORT for subprocesses).
  Treat it as shared: inject faults only on phones from ``make_emulated_phone``.
- ``make_emulated_phone(**kw)``: a fresh phone for one test (kw as EmulatorSession:
  profile, connection='usb'|'wireless', auth=PhoneAuth(mode='device'|'unauthorized'|'offline')).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from device_agents.adbserver import PrivateAdbServer
from device_agents.emulator.session import EmulatorSession


@pytest.fixture(scope="session")
def adb_server() -> Iterator[PrivateAdbServer]:
    server = PrivateAdbServer().start()
    try:
        yield server
    finally:
        server.stop()


def _session(server: PrivateAdbServer, **kw: object) -> EmulatorSession:
    return EmulatorSession(private_server=False, adb_port=server.port, **kw).start()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def emulated_phone(adb_server: PrivateAdbServer) -> Iterator[EmulatorSession]:
    session = _session(adb_server)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def make_emulated_phone(adb_server: PrivateAdbServer) -> Iterator[Callable[..., EmulatorSession]]:
    made: list[EmulatorSession] = []

    def make(**kw: object) -> EmulatorSession:
        s = _session(adb_server, **kw)
        made.append(s)
        return s

    try:
        yield make
    finally:
        for s in made:
            s.stop()
