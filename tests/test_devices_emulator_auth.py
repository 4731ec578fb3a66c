"""The emulated phone authenticates adb servers as adbd does: AUTH(TOKEN) -> AUTH(SIGNATURE)
checked against its authorized keys -> CNXN, else a fresh TOKEN; an offered public key is
never accepted. Keys here are made by the real adb binary (its server, `adb keygen`); the
signatures the tests make themselves are computed from the PEM private key in plain Python,
independently of device_agents.emulator.adbkeys."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
from pathlib import Path

import adbutils
import pytest

from as2d_cli.errors import DeviceError
from device_agents.adbserver import free_port
from device_agents.emulator import adbkeys, wire
from device_agents.emulator.adbd import EmulatedAdbd, PhoneAuth
from device_agents.emulator.phone import ScriptedPhone

ADB = adbutils.adb_path()
# DigestInfo for SHA-1 (RFC 8017, 9.2 note 1), written out here rather than imported.
SHA1_PREFIX = bytes.fromhex("3021300906052b0e03021a05000414")


def _der(data: bytes, pos: int = 0) -> tuple[int, bytes, int]:
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        k = length & 0x7F
        length = int.from_bytes(data[pos : pos + k], "big")
        pos += k
    return tag, data[pos : pos + length], pos + length


def _items(body: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(body):
        _, value, pos = _der(body, pos)
        out.append(value)
    return out


def _private_key(path: Path) -> tuple[int, int, int]:
    """(n, e, d) of adb's PEM private key (PKCS#8, or PKCS#1 'RSA PRIVATE KEY')."""
    text = path.read_text()
    der = base64.b64decode(
        "".join(line for line in text.splitlines() if line and not line.startswith("-----"))
    )
    items = _items(_der(der)[1])
    if "BEGIN PRIVATE KEY" in text:
        items = _items(_der(items[2])[1])  # PrivateKeyInfo.privateKey holds the RSAPrivateKey
    n, e, d = (int.from_bytes(items[i], "big") for i in (1, 2, 3))
    return n, e, d


def _sign(key: tuple[int, int, int], token: bytes) -> bytes:
    """RSA_sign(NID_sha1, token): PKCS#1 v1.5 with the token as the SHA-1 digest."""
    n, _e, d = key
    tail = SHA1_PREFIX + token
    block = b"\x00\x01" + b"\xff" * (256 - 3 - len(tail)) + b"\x00" + tail
    return pow(int.from_bytes(block, "big"), d, n).to_bytes(256, "big")


@pytest.fixture(scope="module")
def other_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second adb key pair, made by `adb keygen` (no server)."""
    path = tmp_path_factory.mktemp("otherkey") / "adbkey"
    subprocess.run(
        [ADB, "keygen", str(path)],
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "HOME": str(path.parent)},
    )
    return path


def _states(port: int) -> dict[str, str]:
    return {d.serial: d.state for d in adbutils.AdbClient(host="127.0.0.1", port=port).list()}


def test_owner_server_is_authorized_and_runs_commands(emulated_phone, adb_server) -> None:
    owner = adbkeys.load_keys(adb_server.home / ".android" / "adbkey.pub")
    assert emulated_phone.adbd.authorized_keys == tuple(owner)
    assert _states(emulated_phone.adb_port)[emulated_phone.serial] == "device"
    assert emulated_phone.device().shell(["echo", "authorized"]).stdout == "authorized\n"
    # The session found the key from the running server's own environment (HOME).
    assert adbkeys.server_key_paths(adb_server.port) == [
        adb_server.home / ".android" / "adbkey.pub"
    ]


def test_another_adb_server_sees_the_phone_unauthorized(emulated_phone, tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "home"
    (home / ".android").mkdir(parents=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("ADB_VENDOR_KEYS", "ANDROID_ADB_SERVER_PORT", "ANDROID_USER_HOME", "ANDROID_SERIAL")
    }
    env.update(HOME=str(home), ADB_LIBUSB="0", ADB_MDNS="0", ADB_MDNS_AUTO_CONNECT="0")

    def adb(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ADB, "-P", str(port), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    try:
        adb("start-server", timeout=60)
        theirs = adbkeys.load_keys(home / ".android" / "adbkey.pub")  # made by that server
        assert theirs[0] not in (emulated_phone.adbd.authorized_keys or ())
        adb("connect", emulated_phone.serial)
        deadline = time.monotonic() + 20
        while (
            _states(port).get(emulated_phone.serial) != "unauthorized"
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert _states(port).get(emulated_phone.serial) == "unauthorized"
        r = adb("-s", emulated_phone.serial, "shell", "echo", "intruder")
        assert r.returncode != 0 and "intruder" not in r.stdout
        assert "unauthorized" in r.stderr
        # It offered its public key (AUTH RSAPUBLICKEY); the phone recorded it and never accepted it.
        offered = [adbkeys.parse_public_key(k) for k in emulated_phone.adbd.offered_keys]
        assert theirs[0] in offered
        assert not any("intruder" in script for script in emulated_phone.phone.history)
        # The owner's server is unaffected.
        assert _states(emulated_phone.adb_port)[emulated_phone.serial] == "device"
        assert emulated_phone.device().shell(["echo", "still"]).stdout == "still\n"
    finally:
        adb("kill-server")


def test_signature_check_accepts_only_authorized_keys(
    adb_server, other_key: Path, tmp_path: Path
) -> None:
    own_pem = adb_server.home / ".android" / "adbkey"
    own_pub = Path(f"{own_pem}.pub")
    own = _private_key(own_pem)
    pub = adbkeys.load_keys(own_pub)[0]
    # The struct layout: the modulus read from adbkey.pub is the PEM key's, and re-encoding
    # (n0inv, rr computed here) gives adb's own line back byte for byte.
    assert (pub.n, pub.e) == own[:2]
    assert pub.encode() == own_pub.read_text().strip()

    token = os.urandom(20)
    sig = _sign(own, token)
    assert adbkeys.verify(pub, token, sig)
    wrong = adbkeys.load_keys(f"{other_key}.pub")[0]
    assert not adbkeys.verify(wrong, token, sig)
    assert not adbkeys.verify(pub, os.urandom(20), sig)  # another token
    assert not adbkeys.verify(pub, token, sig[:-1])  # short
    assert not adbkeys.verify(pub, token, _sign(_private_key(other_key), token))

    phone = ScriptedPhone("k70")
    try:
        refuse = EmulatedAdbd(phone, authorized_keys=f"{other_key}.pub")
        assert refuse.check_signature(token, sig) is None
        accept = EmulatedAdbd(phone, authorized_keys=own_pub)
        assert accept.check_signature(token, sig) == pub
        both = tmp_path / "adb_keys"
        both.write_text(
            f"# comment\n{Path(f'{other_key}.pub').read_text().strip()}\n\n{own_pub.read_text()}\n"
        )
        assert EmulatedAdbd(phone, authorized_keys=both).check_signature(token, sig) == pub
        assert (
            EmulatedAdbd(phone, auth_mode="unauthorized", authorized_keys=own_pub).check_signature(
                token, sig
            )
            is None
        )
    finally:
        phone.close()


def _handshake(adbd: EmulatedAdbd, sign) -> list[wire.Message]:
    """Speak the server's side of the handshake over a raw socket: CNXN, then answer each
    TOKEN with ``sign(token)`` until ``sign`` returns None or adbd sends CNXN."""
    seen = []
    with socket.create_connection(("127.0.0.1", adbd.port), timeout=10) as s:
        s.sendall(
            wire.encode(wire.Message(wire.A_CNXN, wire.A_VERSION, wire.MAX_PAYLOAD, b"host::\0"))
        )
        while True:
            msg = wire.read_message(s)
            assert msg is not None
            seen.append(msg)
            if msg.command == wire.A_CNXN:
                return seen
            assert (msg.command, msg.arg0, len(msg.data)) == (wire.A_AUTH, wire.AUTH_TOKEN, 20)
            sig = sign(msg.data)
            if sig is None:
                return seen
            s.sendall(wire.encode(wire.Message(wire.A_AUTH, wire.AUTH_SIGNATURE, 0, sig)))


def test_handshake_on_the_wire(adb_server, other_key: Path) -> None:
    own_pem = adb_server.home / ".android" / "adbkey"
    own, theirs = _private_key(own_pem), _private_key(other_key)
    phone = ScriptedPhone("k70")
    adbd = EmulatedAdbd(phone, authorized_keys=f"{own_pem}.pub").start()
    try:
        # Wrong key first (a fresh token comes back), then the right one: online.
        keys = [theirs, own]
        seen = _handshake(adbd, lambda token: _sign(keys.pop(0), token))
        assert [m.name for m in seen] == ["AUTH", "AUTH", "CNXN"]
        assert seen[0].data != seen[1].data  # a new token after the failure
        assert seen[2].data.startswith(b"device::")
        # Only the wrong key: never online.
        tries = [theirs, theirs]
        seen = _handshake(adbd, lambda token: _sign(tries.pop(0), token) if tries else None)
        assert [m.name for m in seen] == ["AUTH", "AUTH", "AUTH"]
        assert len({m.data for m in seen}) == 3
    finally:
        adbd.stop()
        phone.close()


def test_key_files_and_missing_keys_fail_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "keys"
    bad.write_text("not-a-key user@host\n")
    with pytest.raises(adbkeys.AdbKeyError, match=r"keys:1: not an adb public key") as err:
        adbkeys.load_keys(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(adbkeys.AdbKeyError, match="does not exist"):
        adbkeys.load_keys(tmp_path / "absent")
    # Default keys: the adb server's $HOME/.android/adbkey.pub, which does not exist yet.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ANDROID_USER_HOME", raising=False)
    phone = ScriptedPhone("k70")
    try:
        with pytest.raises(adbkeys.AdbKeyError) as err:
            EmulatedAdbd(phone).start()
        msg = str(err.value)
        assert "\n" not in msg and str(tmp_path / ".android" / "adbkey.pub") in msg
        assert "adb start-server" in msg
    finally:
        phone.close()


def test_session_with_a_foreign_key_file_is_refused(make_emulated_phone, other_key: Path) -> None:
    with pytest.raises(DeviceError, match="refused the key of the adb server") as err:
        make_emulated_phone(auth=PhoneAuth(authorized_keys=f"{other_key}.pub"))
    assert "\n" not in str(err.value)


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent; picks the outgoing interface
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def test_adbd_is_not_reachable_off_loopback(emulated_phone) -> None:
    assert emulated_phone.adbd._listener.getsockname()[0] == "127.0.0.1"
    addr = _non_loopback_address()
    if addr is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with pytest.raises(OSError):
        socket.create_connection((addr, emulated_phone.adbd.port), timeout=2).close()
