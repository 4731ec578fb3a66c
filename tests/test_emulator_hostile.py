"""The emulated phone against hostile local clients, over raw sockets: a header announcing
more payload than the phone's maximum is refused before any payload is read (and before
authentication), unauthenticated connections are capped, a connection that does not
authenticate in time is closed -- and the owner's adb server is served throughout. Also:
the emulated phone serves the host's own CPU times (the machine that runs its programs)
beside its scripted /proc/stat."""

from __future__ import annotations

import os
import select
import socket
import time
import tracemalloc
from pathlib import Path

import pytest

from device_agents.adb_phone import adb_client
from device_agents.emulator import wire
from device_agents.emulator.adbd import PhoneAuth
from device_agents.emulator.phone import HOST_STAT, host_cpu_stat
from device_agents.gating import CpuTimes

WAIT_S = 30.0  # generous: these are deadlines for the test, never speed goals


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)


def _header(command: int, length: int, arg0: int = 0, arg1: int = 0) -> bytes:
    return wire.HEADER.pack(command, arg0, arg1, length, 0, command ^ 0xFFFFFFFF)


def _closed_by_peer(sock: socket.socket, timeout: float = WAIT_S) -> bool:
    """Whether the phone closes ``sock`` within ``timeout`` (anything it sent is skipped)."""
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            return False
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
    return False


def _wait_for(condition, what: str, timeout: float = WAIT_S) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _start_handshake(port: int) -> tuple[socket.socket, wire.Message]:
    """CNXN as an adb server sends it; returns the socket and the phone's AUTH(TOKEN)."""
    s = _connect(port)
    s.sendall(wire.encode(wire.Message(wire.A_CNXN, wire.A_VERSION, wire.MAX_PAYLOAD, b"host::\0")))
    token = wire.read_message(s)
    assert token is not None and (token.command, token.arg0) == (wire.A_AUTH, wire.AUTH_TOKEN)
    return s, token


def _wait_for_user(port: int, name: str) -> socket.socket:
    """A client that offers its public key and then waits, as an unauthorized adb server."""
    s, _ = _start_handshake(port)
    key = f"QAAAAN0tHOSTILE{name} {name}@flood\0".encode()
    s.sendall(wire.encode(wire.Message(wire.A_AUTH, wire.AUTH_RSAPUBLICKEY, 0, key)))
    return s


def _reconnect_owner(session) -> None:
    """The owner's adb server makes a fresh connection (a new handshake) to the phone."""
    adb_client(session.adb_port).disconnect(session.serial)
    session.connect(timeout=WAIT_S)


def _serves(session, word: str) -> bool:
    return session.device().shell(["echo", word]).stdout == f"{word}\n"


def test_oversized_length_is_refused_before_authentication(make_emulated_phone) -> None:
    session = make_emulated_phone()
    adbd = session.adbd
    port = adbd.port
    assert wire.MAX_PAYLOAD == 256 * 1024  # what the phone announces in its CNXN (arg1)

    # A packet of exactly the maximum is taken (a CNXN with a padded banner: a token comes back).
    with _connect(port) as s:
        banner = b"host::\0".ljust(wire.MAX_PAYLOAD, b"\0")
        s.sendall(wire.encode(wire.Message(wire.A_CNXN, wire.A_VERSION, 4096, banner)))
        reply = wire.read_message(s)
        assert reply is not None and reply.command == wire.A_AUTH
    assert adbd.refused["oversized"] == 0

    tracemalloc.start()
    try:
        # The very first header, before any handshake: one byte over, and 4 GiB.
        for length in (wire.MAX_PAYLOAD + 1, 0xFFFFFFFF):
            with _connect(port) as s:
                s.sendall(_header(wire.A_CNXN, length, wire.A_VERSION, wire.MAX_PAYLOAD))
                assert _closed_by_peer(s), f"a {length}-byte CNXN was not refused"
        # Mid-handshake (after the token, before a signature), with payload bytes following.
        s, _ = _start_handshake(port)
        with s:
            s.sendall(_header(wire.A_AUTH, 1 << 31, wire.AUTH_SIGNATURE) + os.urandom(64 * 1024))
            assert _closed_by_peer(s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # No buffer of the announced size was allocated (2-4 GiB were announced).
    assert peak < 16 * 1024 * 1024, f"peak traced memory {peak} bytes"
    assert adbd.refused["oversized"] == 3
    assert not session.phone.history  # nothing reached the shell

    # The phone still serves its owner: over the live connection and over a new handshake.
    assert _serves(session, "still")
    _reconnect_owner(session)
    assert _serves(session, "again")


def test_unauthenticated_connections_are_capped(make_emulated_phone) -> None:
    session = make_emulated_phone(auth=PhoneAuth(deadline_s=600))  # the deadline plays no part
    adbd = session.adbd
    cap = adbd.max_unauthenticated
    assert cap == 8
    extra = 12

    # Silent connections: the first `cap` may start a handshake, the rest are closed at once.
    flood = [_connect(adbd.port) for _ in range(cap + extra)]
    try:
        for s in flood[cap:]:
            assert _closed_by_peer(s)
        assert adbd.refused["too_many"] == extra
        assert adbd.handshakes() == {"pending": cap, "waiting_for_user": 0}
        # The owner's authenticated connection does not count against the cap.
        assert _serves(session, "busy")
    finally:
        for s in flood:
            s.close()
    _wait_for(lambda: adbd.handshakes()["pending"] == 0, "the flood's connections to end")

    # Connections that offered a key and wait for the user (an unauthorized adb server) hold
    # their slot, but the oldest makes room for a newcomer: the owner still gets in.
    waiting: list[socket.socket] = []
    try:
        for i in range(cap + extra):
            waiting.append(_wait_for_user(adbd.port, f"w{i}"))
            _wait_for(
                lambda n=min(i + 1, cap): (
                    adbd.handshakes() == {"pending": 0, "waiting_for_user": n}
                ),
                f"connection {i} to wait for the user",
            )
        for s in waiting[:extra]:
            assert _closed_by_peer(s)
        assert adbd.refused["evicted"] == extra
        _reconnect_owner(session)  # a fresh handshake while the cap is full
        assert adbd.refused["evicted"] == extra + 1
        assert _serves(session, "owner")
        assert adbd.handshakes() == {"pending": 0, "waiting_for_user": cap - 1}
    finally:
        for s in waiting:
            s.close()


def test_slow_loris_is_closed_at_the_auth_deadline(make_emulated_phone) -> None:
    session = make_emulated_phone(auth=PhoneAuth(deadline_s=1.0))
    adbd = session.adbd

    # Opened first: a client waiting for the user is exempt from the deadline (the phone
    # must keep an unauthorized adb server's connection, as a real phone shows its dialog).
    patient = _wait_for_user(adbd.port, "patient")
    # Never answers its token.
    mute, _ = _start_handshake(adbd.port)
    # Drips a legal message a byte at a time (124 bytes, 0.2 s apart).
    loris = _connect(adbd.port)
    try:
        message = _header(wire.A_CNXN, 100, wire.A_VERSION, wire.MAX_PAYLOAD) + b"h" * 100
        closed = False
        for byte in message:
            try:
                loris.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if _closed_by_peer(loris, timeout=0.2):
                closed = True
                break
        assert closed or _closed_by_peer(loris), "the slow-loris connection was kept"
        assert _closed_by_peer(mute)
        assert adbd.refused["auth_deadline"] == 2
        # Accepted before both, past its deadline too, and still open.
        patient.setblocking(False)
        with pytest.raises(BlockingIOError):
            patient.recv(1)
        assert adbd.handshakes() == {"pending": 0, "waiting_for_user": 1}
        assert _serves(session, "served")
    finally:
        for s in (patient, mute, loris):
            s.close()


def _cpu_fields(stat: str) -> list[int]:
    first = stat.splitlines()[0].split()
    assert first[0] == "cpu"
    return [int(x) for x in first[1:]]


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="this host has no /proc/stat")
def test_the_host_cpu_times_are_served_beside_the_scripted_proc_stat(make_emulated_phone) -> None:
    session = make_emulated_phone()
    device = session.device()
    session.phone.set_load(busy=0.9, steal=0.6)  # what the phone's own /proc/stat says

    first = CpuTimes.parse(device.read_files(["/proc/stat"])["/proc/stat"])
    time.sleep(0.5)  # enough scripted jiffies for the fractions to show
    before = _cpu_fields(host_cpu_stat())
    files = device.read_files(["/proc/stat", HOST_STAT])
    after = _cpu_fields(host_cpu_stat())

    # The scripted /proc/stat (the settle gate's, which tests set) keeps its steal ...
    scripted = CpuTimes.parse(files["/proc/stat"]).since(first)
    assert scripted["steal"] == pytest.approx(0.6, abs=0.05)
    # ... while HOST_STAT is this host's own /proc/stat, read between the two readings here.
    host_text = files[HOST_STAT]
    assert host_text is not None
    served = _cpu_fields(host_text)
    assert len(served) == len(before)
    assert all(b <= s <= a for b, s, a in zip(before, served, after))
    per_cpu = [ln for ln in host_text.splitlines() if ln[3:4].isdigit()]
    assert len(per_cpu) == len([ln for ln in host_cpu_stat().splitlines() if ln[3:4].isdigit()])
    # A host without /proc/stat serves an empty file, which reads as missing.
    assert host_cpu_stat(Path("/no/such/stat")) == ""


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="this host has no /proc/stat")
def test_a_run_records_the_steal_of_the_host_that_ran_it(make_emulated_phone) -> None:
    from device_agents.local import LocalHost

    session = make_emulated_phone()
    session.phone.set_load(busy=0.95, steal=0.9)  # the phone's scripted /proc/stat
    device = session.device()
    before = _cpu_fields(host_cpu_stat())
    work = CpuTimes.read_work(device)
    after = _cpu_fields(host_cpu_stat())
    assert work is not None and work.source == "host"
    # user nice system idle iowait irq softirq steal: the host's, read between the two here.
    assert before[7] <= work.steal <= after[7]
    assert sum(before) <= work.total <= sum(after)
    # The gate still reads the phone's own (scripted) /proc/stat.
    first = CpuTimes.read(device)
    time.sleep(0.5)
    gate = CpuTimes.read(device)
    assert first is not None and gate is not None and gate.source == "phone"
    assert gate.since(first)["steal"] == pytest.approx(0.9, abs=0.05)
    local = CpuTimes.read_work(LocalHost())
    assert local is not None and local.source == "host"
    # A real phone has no HOST_STAT: its own /proc/stat is the machine that ran the work.
    session.phone.fs.remove_dynamic(HOST_STAT)
    own = CpuTimes.read_work(device)
    assert own is not None and own.source == "phone" and own.steal >= gate.steal
