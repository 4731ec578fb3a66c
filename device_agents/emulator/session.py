"""One running emulated phone: the scripted phone, its loopback adbd, and the adb server it
is connected to (a private one when asked). Used by the pytest fixture and by
``as2d emulator start``.

The phone authorizes the key of that adb server only (as if its owner had ticked *Always
allow* for it): the private server's ``adbkey.pub``, or -- for a running server -- the key
file that server uses (found from its process environment on Linux, else
``$HOME/.android/adbkey.pub``), unless ``auth.authorized_keys`` names a key file. Any other adb
server sees the phone ``unauthorized``."""

from __future__ import annotations

import time
from pathlib import Path

from as2d_cli.errors import DeviceError
from device_agents.adb_phone import AdbPhone, _server_up
from device_agents.adbserver import PrivateAdbServer
from device_agents.emulator import adbkeys
from device_agents.emulator.adbd import EmulatedAdbd, PhoneAuth
from device_agents.emulator.phone import ScriptedPhone


class EmulatorSession:
    def __init__(
        self,
        profile: str = "k70",
        port: int = 0,
        adb_port: int | None = None,
        private_server: bool = True,
        connection: str = "usb",
        root: Path | None = None,
        serial: str = "as2demu0001",
        auth: PhoneAuth = PhoneAuth(),
    ) -> None:
        # ``serial``: the phone's hardware serial (ro.serialno); a farm of emulated phones
        # of one model needs one each, as real phones have.
        self.phone = ScriptedPhone(profile, root=root, connection=connection, serial=serial)
        self._keys_file = auth.authorized_keys
        try:
            # An explicit file is read (and checked) now; otherwise the attached server's key
            # is authorized in start(), once that server runs (it creates its key on start).
            self.adbd = EmulatedAdbd(
                self.phone,
                port=port,
                auth_mode=auth.mode,
                authorized_keys=() if auth.authorized_keys is None else auth.authorized_keys,
                max_unauthenticated=auth.max_unauthenticated,
                auth_deadline_s=auth.deadline_s,
            )
        except Exception:
            self.phone.close()
            raise
        self._want_private = private_server
        self._adb_port = adb_port
        self.server: PrivateAdbServer | None = None
        self.adb_port = 0

    @property
    def serial(self) -> str:
        return self.adbd.serial

    def start(self, timeout: float = 10.0) -> EmulatorSession:
        try:
            self.adbd.start()
        except OSError as exc:
            self.phone.close()
            raise DeviceError(
                f"cannot listen on 127.0.0.1:{self.adbd._requested_port} ({exc.strerror}); "
                f"pick another --port"
            ) from None
        if self._want_private or (self._adb_port and not _server_up(self._adb_port)):
            self.server = PrivateAdbServer(port=self._adb_port).start()
            self.adb_port = self.server.port
        else:
            from device_agents.adb_phone import adb_port

            self.adb_port = self._adb_port or adb_port()
            if not _server_up(self.adb_port):
                self.stop()
                raise DeviceError(
                    f"no adb server listens on port {self.adb_port}; start one with "
                    f"`adb start-server` or pass --private-server"
                )
        self.phone.adb_server_port = self.adb_port
        if self._keys_file is None and self.adbd.auth_mode == "device":
            try:
                self.adbd.authorize(self._server_keys())
            except Exception:
                self.stop()
                raise
        try:
            self.connect(timeout)
        except Exception:
            self.stop()
            raise
        return self

    def _server_keys(self) -> list[adbkeys.AdbPublicKey]:
        """The public key(s) of the adb server this phone is for."""
        if self.server is not None:
            paths = [self.server.home / ".android" / "adbkey.pub"]
        else:
            paths = adbkeys.server_key_paths(self.adb_port) or adbkeys.user_key_paths()
        return adbkeys.load_user_keys(
            paths,
            f"the adb server on port {self.adb_port} keeps its key elsewhere; "
            f"pass --authorized-keys with its adbkey.pub",
        )

    def connect(self, timeout: float = 10.0) -> None:
        """`adb connect` and wait until the server lists the phone (in any state but
        'connecting' when the phone is meant to be unauthorized/offline)."""
        from device_agents.adb_phone import adb_client

        client = adb_client(self.adb_port)
        if self.adbd.auth_mode == "offline":
            # The server's connect waits ~10 s for a handshake that never comes; the
            # transport stays registered (offline) after we stop waiting for the reply.
            try:
                client.connect(self.serial, timeout=0.3)
            except Exception:
                pass
        else:
            client.connect(self.serial, timeout=timeout)
        want = {"device": "device", "unauthorized": "unauthorized", "offline": "offline"}[
            self.adbd.auth_mode
        ]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = {d.serial: d.state for d in client.list()}
            if states.get(self.serial) == want:
                return
            if (
                want == "device"
                and states.get(self.serial) == "unauthorized"
                and self.adbd.offered_keys
            ):
                where = (
                    f"{self._keys_file} does not hold it"
                    if self._keys_file is not None
                    else "pass --authorized-keys with that server's adbkey.pub"
                )
                raise DeviceError(
                    f"the emulated phone refused the key of the adb server on port "
                    f"{self.adb_port}; {where}"
                )
            time.sleep(0.03)
        raise DeviceError(
            f"the adb server on port {self.adb_port} did not list {self.serial} as {want} "
            f"within {timeout:g} s"
        )

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (adb, as2d) that should use this phone's server."""
        return {"ANDROID_ADB_SERVER_PORT": str(self.adb_port)}

    def device(self) -> AdbPhone:
        return AdbPhone(self.serial, self.adb_port)

    def stop(self) -> None:
        try:
            if self.adb_port and _server_up(self.adb_port):
                from device_agents.adb_phone import adb_client

                adb_client(self.adb_port).disconnect(self.serial)
        except Exception:
            pass
        self.adbd.stop()
        self.phone.close()
        if self.server is not None:
            self.server.stop()

    def __enter__(self) -> EmulatorSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
