"""adb's RSA keys, as adbd checks them (AOSP adb protocol.txt, adbd's auth and
libcrypto_utils' android_pubkey):

- a public key is the base64 of the ``RSAPublicKey`` struct (all little-endian: u32
  modulus_size_words = 64, u32 n0inv = -1/n mod 2^32, u8[256] modulus, u8[256] rr = 2^4096
  mod n, u32 exponent), followed by `` user@host`` — one per line in ``adbkey.pub`` and in a
  phone's ``adb_keys``;
- the adb server answers adbd's 20-byte token with ``RSA_sign(NID_sha1, token)``: PKCS#1 v1.5
  over the token taken as an already-computed SHA-1 digest, so the signature, raised to the
  public exponent, must give ``00 01 FF..FF 00 || DigestInfo(SHA-1) || token``.

Verification is plain integer arithmetic (``pow(sig, e, n)``); no crypto library is needed.

Where the adb server keeps its key: ``$HOME/.android/adbkey`` (and ``adbkey.pub`` next to it;
without HOME, the home directory of the user). The bundled adb (36) ignores
``ANDROID_USER_HOME`` for its key; :func:`user_key_paths` still adds
``$ANDROID_USER_HOME/adbkey.pub`` when that file exists, since Android tools that honour the
variable keep the key there.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import pwd
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from as2d_cli.errors import UserError

MODULUS_WORDS = 64
MODULUS_BYTES = 4 * MODULUS_WORDS  # RSA-2048
TOKEN_SIZE = 20
_STRUCT = struct.Struct(f"<II{MODULUS_BYTES}s{MODULUS_BYTES}sI")  # 524 bytes
# DER of DigestInfo { AlgorithmIdentifier sha1, NULL }, OCTET STRING (20) -- RFC 8017 9.2 note 1
SHA1_DIGEST_INFO = bytes.fromhex("3021300906052b0e03021a05000414")


class AdbKeyError(UserError):
    """A key file is missing or is not in adb's public-key format."""


@dataclass(frozen=True)
class AdbPublicKey:
    n: int
    e: int
    comment: str = ""

    def fingerprint(self) -> str:
        """Short id for messages: the last 8 hex digits of the modulus and the comment."""
        return f"{self.n & 0xFFFFFFFF:08x}" + (f" {self.comment}" if self.comment else "")

    def encode(self) -> str:
        """The line adb writes to ``adbkey.pub`` (without a newline)."""
        return encode_public_key(self.n, self.e, self.comment)

    def verify(self, token: bytes, signature: bytes) -> bool:
        return verify(self, token, signature)


def encode_public_key(n: int, e: int, comment: str = "") -> str:
    if n.bit_length() > 8 * MODULUS_BYTES or n % 2 == 0:
        raise ValueError("adb keys are odd RSA moduli of at most 2048 bits")
    n0inv = (-pow(n, -1, 1 << 32)) % (1 << 32)
    rr = pow(2, 2 * 8 * MODULUS_BYTES, n)
    blob = _STRUCT.pack(
        MODULUS_WORDS,
        n0inv,
        n.to_bytes(MODULUS_BYTES, "little"),
        rr.to_bytes(MODULUS_BYTES, "little"),
        e,
    )
    return base64.b64encode(blob).decode("ascii") + (f" {comment}" if comment else "")


def parse_public_key(text: str | bytes) -> AdbPublicKey:
    """One key in adb's format (``BASE64 [user@host]``, a trailing NUL allowed as in the
    AUTH(RSAPUBLICKEY) payload). Raises ValueError saying what is wrong."""
    if isinstance(text, bytes):
        text = text.split(b"\0", 1)[0].decode("utf-8", "replace")
    b64, _, comment = text.strip().partition(" ")
    if not b64:
        raise ValueError("empty key")
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    if len(blob) != _STRUCT.size:
        raise ValueError(
            f"the decoded key has {len(blob)} bytes, an adb RSA-2048 key has {_STRUCT.size}"
        )
    words, _n0inv, modulus, _rr, e = _STRUCT.unpack(blob)
    if words != MODULUS_WORDS:
        raise ValueError(f"modulus of {words} words, adb keys have {MODULUS_WORDS}")
    n = int.from_bytes(modulus, "little")
    if n < 3 or n % 2 == 0 or e < 3 or e % 2 == 0:
        raise ValueError("not an RSA public key (even or tiny modulus or exponent)")
    return AdbPublicKey(n, e, comment.strip())


def load_keys(path: str | os.PathLike[str]) -> list[AdbPublicKey]:
    """Every key in a file with one adb public key per line (``adbkey.pub``, ``adb_keys``);
    blank lines and lines starting with ``#`` are skipped."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise AdbKeyError(f"authorized keys file {p} does not exist") from None
    except OSError as exc:
        raise AdbKeyError(f"cannot read authorized keys file {p} ({exc.strerror})") from None
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip().rstrip("\0")
        if not line or line.startswith("#"):
            continue
        try:
            keys.append(parse_public_key(line))
        except ValueError as exc:
            raise AdbKeyError(
                f"{p}:{number}: not an adb public key ({exc}); expected one "
                f"`adbkey.pub` line (base64 user@host) per line"
            ) from None
    if not keys:
        raise AdbKeyError(f"authorized keys file {p} holds no key")
    return keys


def verify(key: AdbPublicKey, token: bytes, signature: bytes) -> bool:
    """True when ``signature`` is ``RSA_sign(NID_sha1, token)`` made with ``key``'s private key."""
    if len(token) != TOKEN_SIZE or len(signature) != MODULUS_BYTES:
        return False
    s = int.from_bytes(signature, "big")
    if s >= key.n:
        return False
    em = pow(s, key.e, key.n).to_bytes(MODULUS_BYTES, "big")
    return hmac.compare_digest(em, pkcs1_sha1_block(token))


def pkcs1_sha1_block(digest: bytes, size: int = MODULUS_BYTES) -> bytes:
    """EMSA-PKCS1-v1_5 encoding of an already-computed SHA-1 digest."""
    tail = SHA1_DIGEST_INFO + digest
    return b"\x00\x01" + b"\xff" * (size - 3 - len(tail)) + b"\x00" + tail


def _home(env: Mapping[str, str], uid: int | None = None) -> Path | None:
    if env.get("HOME"):
        return Path(env["HOME"])
    try:
        return Path(pwd.getpwuid(os.getuid() if uid is None else uid).pw_dir)
    except KeyError:
        return None


def user_key_paths(env: Mapping[str, str] | None = None, uid: int | None = None) -> list[Path]:
    """The public key an adb server run with ``env`` uses: ``$HOME/.android/adbkey.pub``
    (first), plus ``$ANDROID_USER_HOME/adbkey.pub`` when set, different and present."""
    env = os.environ if env is None else env
    paths = []
    home = _home(env, uid)
    if home is not None:
        paths.append(home / ".android" / "adbkey.pub")
    user_home = env.get("ANDROID_USER_HOME")
    if user_home:
        extra = Path(user_home) / "adbkey.pub"
        if extra not in paths and extra.is_file():
            paths.append(extra)
    return paths


def load_user_keys(paths: Iterable[Path], missing_hint: str) -> list[AdbPublicKey]:
    """Keys from the first of ``paths`` (which must exist) and any other that exists."""
    paths = list(paths)
    if not paths or not paths[0].is_file():
        where = paths[0] if paths else "~/.android/adbkey.pub"
        raise AdbKeyError(f"no adb key to authorize: {where} does not exist; {missing_hint}")
    keys: list[AdbPublicKey] = []
    for p in paths:
        if p.is_file():
            keys += [k for k in load_keys(p) if k not in keys]
    return keys


def server_key_paths(port: int) -> list[Path] | None:
    """The key paths of the adb server (a process named ``adb`` of this user) listening on
    127.0.0.1:``port``, from its own environment -- None when it cannot be found (not Linux,
    another user's process, no such server)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    for pid in pids:
        proc = Path("/proc", pid)
        try:
            if (proc / "comm").read_text().strip() != "adb":
                continue
            fds = os.listdir(proc / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(proc / "fd" / fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                try:
                    raw = (proc / "environ").read_bytes()
                    uid = proc.stat().st_uid
                except OSError:
                    return None
                env = dict(
                    item.split("=", 1)
                    for item in raw.decode("utf-8", "replace").split("\0")
                    if "=" in item
                )
                return user_key_paths(env, uid)
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = LISTEN
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes
