"""A loopback adbd: accepts the adb server's TCP connection (``adb connect 127.0.0.1:PORT``),
speaks the adb transport protocol (CNXN/AUTH, OPEN/OKAY/WRTE/CLSE with flow control) and
serves ``shell:``, ``shell,v2:``, ``exec:`` and ``sync:`` from a :class:`ScriptedPhone`.

Authentication is adbd's: on CNXN it sends AUTH(TOKEN, 20 random bytes); an AUTH(SIGNATURE)
that verifies against one of the authorized keys (adbkeys.py) brings the device online, any
other gets a fresh TOKEN; an offered AUTH(RSAPUBLICKEY) is never accepted (a real phone would
ask the user), so an adb server with another key sees the phone ``unauthorized``.

Hostile local clients: a header announcing more payload than the phone's maximum
(wire.MAX_PAYLOAD) closes the connection before any of it is read; at most
``max_unauthenticated`` connections may be unauthenticated at once (a new one beyond that
is closed at once, unless the oldest of those merely waits for the user, which makes room);
and a connection still unauthenticated ``auth_deadline_s`` after it was accepted is closed,
unless it waits for the user (it offered its public key, or the phone plays 'offline'). So
memory held for connections that have not authenticated stays bounded.

Written from the AOSP protocol documents (protocol.txt, SERVICES.TXT, SYNC.TXT). One
thread per connection reads messages; each opened stream runs its service in its own
thread, so a stalled command never blocks the transport.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import socket
import stat as stat_mod
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from device_agents.emulator import adbkeys, wire
from device_agents.emulator.phone import ScriptedPhone
from device_agents.emulator.pipes import Pipe, StreamClosed
from device_agents.emulator.shell import interactive

log = logging.getLogger(__name__)

FEATURES = "shell_v2,cmd,fixed_push_mkdir,fixed_push_symlink_timestamp"
# adbd slows down a client that keeps failing (1 s per attempt past 256 failures).
_FREE_AUTH_FAILURES = 256
# Connections not authenticated yet: at most this many at once, each for at most this long
# (an adb server on loopback authenticates in milliseconds).
MAX_UNAUTHENTICATED = 8
AUTH_DEADLINE_S = 10.0


@dataclass(frozen=True)
class PhoneAuth:
    """How the emulated phone answers adb's authentication. ``mode``: 'device' authorizes the
    key file ``authorized_keys`` (by default, the attached adb server's key), 'unauthorized'
    and 'offline' play a phone that never does. Connections that have not authenticated: at
    most ``max_unauthenticated`` at once, each closed ``deadline_s`` after it opened."""

    mode: str = "device"
    authorized_keys: str | os.PathLike[str] | None = None
    max_unauthenticated: int = MAX_UNAUTHENTICATED
    deadline_s: float = AUTH_DEADLINE_S


class Stream:
    """One adb stream (OPEN'ed by the host). Writes honour adb's one-WRTE-in-flight rule."""

    def __init__(self, transport: Transport, local_id: int, remote_id: int) -> None:
        self.transport = transport
        self.local_id = local_id
        self.remote_id = remote_id
        self.ready = threading.Event()
        self.ready.set()
        self.closed = threading.Event()
        self._inbound: queue.Queue[bytes | None] = queue.Queue()
        self._pending = b""

    def write(self, data: bytes) -> None:
        limit = self.transport.max_payload
        for start in range(0, len(data), limit):
            chunk = data[start : start + limit]
            while not self.ready.wait(0.05):
                if self.closed.is_set() or not self.transport.alive:
                    raise StreamClosed()
            if self.closed.is_set():
                raise StreamClosed()
            self.ready.clear()
            self.transport.send(wire.Message(wire.A_WRTE, self.local_id, self.remote_id, chunk))

    def read(self, timeout: float | None = None) -> bytes | None:
        """Next chunk the host wrote; None once the host closed the stream."""
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        try:
            item = self._inbound.get(timeout=timeout)
        except queue.Empty:
            return b""
        if item is None:
            self._inbound.put(None)  # stay at EOF for later readers
        return item

    def read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.read()
            if chunk is None:
                raise StreamClosed()
            buf += chunk
        if len(buf) > n:
            self._pending = bytes(buf[n:]) + self._pending
        return bytes(buf[:n])

    def _deliver(self, data: bytes | None) -> None:
        self._inbound.put(data)

    def close(self) -> None:
        """Close from our side (service finished)."""
        if not self.closed.is_set():
            self.closed.set()
            self._deliver(None)
            try:
                self.transport.send(wire.Message(wire.A_CLSE, self.local_id, self.remote_id))
            except OSError:
                pass
            self.transport.forget(self.local_id)


class Transport(threading.Thread):
    """One connection from the adb server."""

    def __init__(self, adbd: EmulatedAdbd, sock: socket.socket) -> None:
        super().__init__(daemon=True, name="emulated-adbd-transport")
        self.adbd = adbd
        self.sock = sock
        self.alive = True
        self.max_payload = 4096
        self._send_lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._next_id = 1
        self._lock = threading.Lock()
        self.online = False
        self._token: bytes | None = None
        self._auth_failures = 0
        self.accepted_at = time.monotonic()
        # The peer has played its whole hand and waits for the user (offered its public key,
        # or sent CNXN to a phone playing 'offline'): exempt from the auth deadline.
        self.waiting_for_user = False

    def send(self, msg: wire.Message) -> None:
        with self._send_lock:
            self.sock.sendall(wire.encode(msg))

    def forget(self, local_id: int) -> None:
        with self._lock:
            self._streams.pop(local_id, None)

    def drop(self) -> None:
        """Cut the connection as an unplugged cable would."""
        self.alive = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self._lock:
            streams = list(self._streams.values())
            self._streams.clear()
        for s in streams:
            s.closed.set()
            s._deliver(None)

    def run(self) -> None:
        try:
            self._loop()
        except (OSError, ConnectionError) as exc:
            log.debug("transport ended: %s", exc)
        finally:
            self.drop()
            self.adbd._transport_ended(self)

    def _loop(self) -> None:
        while self.alive:
            try:
                msg = wire.read_message(self.sock, wire.MAX_PAYLOAD)
            except wire.PayloadTooLarge as exc:
                self.adbd._refuse(
                    "oversized",
                    f"{exc} ({'authenticated' if self.online else 'before authentication'}); "
                    "connection closed",
                )
                return
            if msg is None:
                return
            self._handle(msg)

    def _handle(self, msg: wire.Message) -> None:
        phone = self.adbd.phone
        if msg.command == wire.A_CNXN:
            self.max_payload = max(4096, min(msg.arg1, wire.MAX_PAYLOAD))
            if self.adbd.auth_mode == "offline":
                self.waiting_for_user = True
                return  # never answer: the server keeps the device 'offline'
            if self.online:  # an authenticated peer starts over: a fresh deadline
                self.accepted_at = time.monotonic()
            self.online = False
            self._send_token()
        elif msg.command == wire.A_AUTH:
            if self.online or self._token is None:
                return  # adbd ignores AUTH outside the handshake
            if msg.arg0 == wire.AUTH_SIGNATURE:
                key = self.adbd.check_signature(self._token, msg.data)
                if key is None:
                    # Next token: the server signs it with its next key, and once it has none
                    # left offers its public key (AUTH RSAPUBLICKEY).
                    self._auth_failures += 1
                    if self._auth_failures > _FREE_AUTH_FAILURES:
                        time.sleep(1)
                    self._send_token()
                    return
                self._token = None
                self._auth_failures = 0
                self.online = True
                log.info("adb key %s authorized", key.fingerprint())
                self.send(
                    wire.Message(
                        wire.A_CNXN, wire.A_VERSION, wire.MAX_PAYLOAD, phone.banner(FEATURES)
                    )
                )
            elif msg.arg0 == wire.AUTH_RSAPUBLICKEY:
                # A real phone asks "Allow USB debugging?"; this one never allows it, so the
                # server keeps the device 'unauthorized'.
                self.waiting_for_user = True
                self.adbd._offered(msg.data)
        elif msg.command == wire.A_OPEN:
            if not self.online:
                return
            self._open(msg.arg0, msg.data.rstrip(b"\0").decode("utf-8", "replace"))
        elif msg.command == wire.A_OKAY:
            with self._lock:
                s = self._streams.get(msg.arg1)
            if s is not None:
                s.remote_id = msg.arg0
                s.ready.set()
        elif msg.command == wire.A_WRTE:
            with self._lock:
                s = self._streams.get(msg.arg1)
            if s is not None:
                s._deliver(msg.data)
                self.send(wire.Message(wire.A_OKAY, s.local_id, s.remote_id))
        elif msg.command == wire.A_CLSE:
            with self._lock:
                s = self._streams.pop(msg.arg1, None)
            if s is not None:
                s.closed.set()
                s._deliver(None)

    def _send_token(self) -> None:
        self._token = os.urandom(adbkeys.TOKEN_SIZE)
        self.send(wire.Message(wire.A_AUTH, wire.AUTH_TOKEN, 0, self._token))

    def _open(self, remote_id: int, destination: str) -> None:
        service = _pick_service(destination)
        if service is None:
            self.send(wire.Message(wire.A_CLSE, 0, remote_id))
            return
        with self._lock:
            local_id = self._next_id
            self._next_id += 1
            stream = Stream(self, local_id, remote_id)
            self._streams[local_id] = stream
        self.send(wire.Message(wire.A_OKAY, local_id, remote_id))
        threading.Thread(
            target=_run_service,
            args=(service, self.adbd.phone, stream),
            daemon=True,
            name=f"emulated-adbd-{destination[:24]}",
        ).start()


Service = Callable[[ScriptedPhone, Stream], None]


def _run_service(service: Service, phone: ScriptedPhone, stream: Stream) -> None:
    try:
        service(phone, stream)
    except StreamClosed:
        pass
    except Exception:  # a bug in a handler must not kill the phone; show it on stderr
        log.exception("emulated phone service failed")
    finally:
        stream.close()


def _pick_service(dest: str) -> Service | None:
    if dest.startswith("shell,") or dest.startswith("shell:"):
        head, _, command = dest.partition(":")
        options = head.split(",")[1:]
        if "v2" in options:
            return lambda phone, s: _shell_v2(phone, s, command)
        return lambda phone, s: _shell_v1(phone, s, command)
    if dest.startswith("exec:"):
        return lambda phone, s: _shell_v1(phone, s, dest[len("exec:") :])
    if dest.startswith("sync:"):
        return _sync
    return None


def _shell_v1(phone: ScriptedPhone, stream: Stream, command: str) -> None:
    """Legacy shell: stdout and stderr merged, no exit status, stdin from host WRTEs."""
    stdin = Pipe()
    cancel = threading.Event()
    _pump_v1_stdin(stream, stdin, cancel)
    write = _guarded(stream.write, cancel)
    if not command.strip():
        interactive(phone, stdin, write, cancel)
        return
    phone.run_script(command, stdin=stdin, stdout=write, stderr=write, cancel=cancel)


def _pump_v1_stdin(stream: Stream, stdin: Pipe, cancel: threading.Event) -> None:
    def pump() -> None:
        while True:
            data = stream.read()
            if data is None:
                stdin.close()
                if stream.closed.is_set():
                    cancel.set()
                return
            stdin.write(data)

    threading.Thread(target=pump, daemon=True).start()


def _guarded(write: Callable[[bytes], None], cancel: threading.Event) -> Callable[[bytes], None]:
    def guarded(data: bytes) -> None:
        if not data:
            return
        try:
            write(data)
        except StreamClosed:
            cancel.set()
            raise

    return guarded


def _shell_v2(phone: ScriptedPhone, stream: Stream, command: str) -> None:
    """Shell protocol v2: packets [id u8][len u32 LE][data]; 0 stdin, 1 stdout, 2 stderr,
    3 exit (one byte), 4 close stdin, 5 window size."""
    stdin = Pipe()
    cancel = threading.Event()
    lock = threading.Lock()

    def packet(kind: int, data: bytes) -> None:
        with lock:
            stream.write(bytes([kind]) + struct.pack("<I", len(data)) + data)

    def pump() -> None:
        try:
            while True:
                head = stream.read_exact(5)
                kind, length = head[0], struct.unpack("<I", head[1:])[0]
                data = stream.read_exact(length) if length else b""
                if kind == 0:
                    stdin.write(data)
                elif kind == 4:
                    stdin.close()
        except StreamClosed:
            stdin.close()
            cancel.set()

    threading.Thread(target=pump, daemon=True).start()
    out = _guarded(lambda d: packet(1, d), cancel)
    err = _guarded(lambda d: packet(2, d), cancel)
    try:
        if command.strip():
            code = phone.run_script(command, stdin=stdin, stdout=out, stderr=err, cancel=cancel)
        else:
            code = interactive(phone, stdin, out, cancel)
    except StreamClosed:
        raise
    except Exception as exc:  # a handler bug: report it like a crashed process, keep serving
        log.exception("emulated phone command failed: %s", command)
        err(f"emulated phone: command crashed: {type(exc).__name__}: {exc}\n".encode())
        code = 255
    packet(3, bytes([code & 0xFF]))


def _sync(phone: ScriptedPhone, stream: Stream) -> None:
    """The file sync service (SYNC.TXT, v1 requests STAT/LIST/SEND/RECV/QUIT)."""
    while True:
        try:
            head = stream.read_exact(8)
        except StreamClosed:
            return
        req, length = head[:4], struct.unpack("<I", head[4:])[0]
        arg = stream.read_exact(length).decode("utf-8", "replace") if length else ""
        if req == b"QUIT":
            return
        if req == b"STAT":
            st = phone.fs.stat(arg)
            mode, size, mtime = st if st else (0, 0, 0)
            stream.write(b"STAT" + struct.pack("<III", mode, size & 0xFFFFFFFF, mtime))
        elif req == b"LIST":
            out = bytearray()
            for name, (mode, size, mtime) in phone.fs.listdir(arg):
                raw = name.encode()
                out += (
                    b"DENT" + struct.pack("<IIII", mode, size & 0xFFFFFFFF, mtime, len(raw)) + raw
                )
            out += b"DONE" + struct.pack("<IIII", 0, 0, 0, 0)
            stream.write(bytes(out))
        elif req == b"SEND":
            _sync_send(phone, stream, arg)
        elif req == b"RECV":
            _sync_recv(phone, stream, arg)
        else:
            _sync_fail(stream, f"unknown sync request {req!r}")
            return


def _sync_fail(stream: Stream, message: str) -> None:
    raw = message.encode()
    stream.write(b"FAIL" + struct.pack("<I", len(raw)) + raw)


def _sync_send(phone: ScriptedPhone, stream: Stream, arg: str) -> None:
    """Stream DATA blocks straight into the file (bundles are hundreds of MB)."""
    path, _, mode_text = arg.rpartition(",")
    if not path:
        path, mode_text = arg, "33188"
    mode = int(mode_text) if mode_text.isdigit() else 0o100644
    fh, error = phone.fs.open_write(path)
    mtime = 0
    try:
        while True:
            head = stream.read_exact(8)
            kind, value = head[:4], struct.unpack("<I", head[4:])[0]
            if kind == b"DATA":
                data = stream.read_exact(value)
                if fh is not None:
                    fh.write(data)
            elif kind == b"DONE":
                mtime = value
                break
            else:
                error = error or f"unexpected {kind!r} during SEND"
                break
    finally:
        if fh is not None:
            fh.close()
    if error:
        _sync_fail(stream, error)
        return
    phone.fs.finish_write(path, stat_mod.S_IMODE(mode), mtime)
    stream.write(b"OKAY" + struct.pack("<I", 0))


def _sync_recv(phone: ScriptedPhone, stream: Stream, path: str) -> None:
    try:
        src = phone.fs.open_read(path)
    except OSError as exc:
        _sync_fail(
            stream,
            f"remote object '{path}' does not exist"
            if isinstance(exc, FileNotFoundError)
            else str(exc),
        )
        return
    out = bytearray()
    with src:
        while chunk := src.read(64 * 1024):  # SYNC.TXT: DATA blocks of at most 64 KiB
            out += b"DATA" + struct.pack("<I", len(chunk)) + chunk
            if len(out) >= wire.MAX_PAYLOAD:
                stream.write(bytes(out))
                out.clear()
    out += b"DONE" + struct.pack("<I", 0)
    stream.write(bytes(out))


class EmulatedAdbd:
    """The listening side. ``auth_mode`` is 'device' (accept an adb server whose signature
    verifies against ``authorized_keys``), 'unauthorized' (no key is ever accepted) or
    'offline' (the handshake never completes).

    ``authorized_keys`` is a file with one adb public key per line (``adbkey.pub`` format)
    or the keys themselves; None means the key of an adb server run by this user
    (``$HOME/.android/adbkey.pub``), read in :meth:`start`. :meth:`authorize` replaces them.
    """

    def __init__(
        self,
        phone: ScriptedPhone,
        port: int = 0,
        auth_mode: str = "device",
        authorized_keys: str | os.PathLike[str] | Iterable[adbkeys.AdbPublicKey] | None = None,
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
        auth_deadline_s: float = AUTH_DEADLINE_S,
    ) -> None:
        if auth_mode not in ("device", "unauthorized", "offline"):
            raise ValueError(
                f"auth_mode must be device, unauthorized or offline, not {auth_mode!r}"
            )
        self.phone = phone
        self.auth_mode = auth_mode
        self.authorized_keys: tuple[adbkeys.AdbPublicKey, ...] | None = None
        if authorized_keys is not None:
            self.authorize(authorized_keys)
        self.offered_keys: list[str] = []  # public keys offered by servers and not accepted
        if max_unauthenticated < 1 or auth_deadline_s <= 0:
            raise ValueError("max_unauthenticated must be >= 1 and auth_deadline_s > 0")
        self.max_unauthenticated = max_unauthenticated
        self.auth_deadline_s = auth_deadline_s
        # Connections refused or cut, by reason: oversized (a packet above MAX_PAYLOAD),
        # too_many (over max_unauthenticated), evicted (made room for a new one while
        # waiting for the user), auth_deadline (not authenticated in time).
        self.refused: collections.Counter[str] = collections.Counter()
        self._requested_port = port
        self.port = 0
        self._listener: socket.socket | None = None
        self._transports: list[Transport] = []
        self._lock = threading.Lock()
        self._accepting = threading.Event()
        self._stopped = threading.Event()
        phone.attach_adbd(self)

    def authorize(self, keys: str | os.PathLike[str] | Iterable[adbkeys.AdbPublicKey]) -> None:
        """Accept exactly these keys from now on (a key file, or the keys)."""
        if isinstance(keys, (str, os.PathLike)):
            self.authorized_keys = tuple(adbkeys.load_keys(Path(keys)))
        else:
            self.authorized_keys = tuple(keys)

    def check_signature(self, token: bytes, signature: bytes) -> adbkeys.AdbPublicKey | None:
        """The authorized key that made ``signature`` over ``token``, or None."""
        if self.auth_mode != "device":
            return None
        for key in self.authorized_keys or ():
            if key.verify(token, signature):
                return key
        return None

    def _offered(self, payload: bytes) -> None:
        text = payload.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
        try:
            who = adbkeys.parse_public_key(text).fingerprint()
        except ValueError as exc:
            who = f"malformed ({exc})"
        log.info("adb server offered key %s: not authorized (the emulated phone never asks)", who)
        with self._lock:
            if text not in self.offered_keys:
                self.offered_keys.append(text)

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EmulatedAdbd:
        if self.auth_mode == "device" and self.authorized_keys is None:
            self.authorized_keys = tuple(
                adbkeys.load_user_keys(
                    adbkeys.user_key_paths(),
                    "start the adb server once (`adb start-server` creates it) or pass authorized_keys",
                )
            )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._requested_port))  # loopback only, never 0.0.0.0
        sock.listen(8)
        sock.settimeout(0.2)
        self._listener = sock
        self.port = sock.getsockname()[1]
        self._accepting.set()
        threading.Thread(target=self._accept_loop, daemon=True, name="emulated-adbd-accept").start()
        return self

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            self._reap()
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._accepting.is_set():
                conn.close()  # unplugged or vanished: refuse like a missing device
                continue
            self._reap()
            if not self._make_room():
                conn.close()
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t = Transport(self, conn)
            with self._lock:
                self._transports.append(t)
            t.start()

    def _unauthenticated(self) -> list[Transport]:
        """Live connections not authenticated yet, oldest first."""
        with self._lock:
            return [t for t in self._transports if t.alive and not t.online]

    def handshakes(self) -> dict[str, int]:
        """Live unauthenticated connections: ``pending`` (within the auth deadline) and
        ``waiting_for_user``."""
        conns = self._unauthenticated()
        waiting = sum(t.waiting_for_user for t in conns)
        return {"pending": len(conns) - waiting, "waiting_for_user": waiting}

    def _reap(self) -> None:
        """Close connections still unauthenticated past the auth deadline."""
        now = time.monotonic()
        for t in self._unauthenticated():
            if not t.waiting_for_user and now - t.accepted_at > self.auth_deadline_s:
                self._refuse(
                    "auth_deadline",
                    f"a connection did not authenticate within {self.auth_deadline_s:g} s; closed",
                )
                t.drop()

    def _make_room(self) -> bool:
        """Whether a new connection may start its handshake: below the cap, or the oldest
        connection waiting for the user is cut to make room."""
        waiting = self._unauthenticated()
        if len(waiting) < self.max_unauthenticated:
            return True
        idle = [t for t in waiting if t.waiting_for_user]
        if idle:
            self._refuse(
                "evicted",
                f"{self.max_unauthenticated} connections are unauthenticated; closed the "
                "oldest one waiting for the user to make room",
            )
            idle[0].drop()
            return True
        self._refuse(
            "too_many",
            f"{self.max_unauthenticated} connections are authenticating already; "
            "a new one was closed at once",
        )
        return False

    def _refuse(self, reason: str, message: str) -> None:
        with self._lock:
            self.refused[reason] += 1
        log.warning("emulated adbd on %s: %s", self.serial, message)

    def _transport_ended(self, t: Transport) -> None:
        with self._lock:
            if t in self._transports:
                self._transports.remove(t)

    def drop_connections(self, refuse: bool) -> None:
        """Cut every connection; with ``refuse`` also stop accepting new ones."""
        if refuse:
            self._accepting.clear()
        with self._lock:
            transports = list(self._transports)
        for t in transports:
            t.drop()

    def accept_again(self) -> None:
        self._accepting.set()

    def stop(self) -> None:
        self._stopped.set()
        self.drop_connections(refuse=True)
        if self._listener is not None:
            self._listener.close()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            with self._lock:
                if not self._transports:
                    break
            time.sleep(0.01)
