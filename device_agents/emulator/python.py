"""A phone "with Python": ``python3`` (and ``python``) on the emulated phone run this host's
interpreter, the way a phone with a Python installation (Termux, a rooted build) runs its
own. Registered through the phone's extension point (docs/devices.md).

The phone's interpreter brings its own libraries (numpy, onnxruntime, tokenizers,
soundfile: this host's site-packages) but nothing of the project: it runs with ``-S`` so
no ``.pth`` file is processed -- in particular not the editable install that would map
``as2d_cli``/``native`` back to the checkout -- and ``sys.path`` is the phone's
``PYTHONPATH`` followed by the interpreter's site-packages. Code must therefore be pushed
to the phone and put on ``PYTHONPATH`` there, as on a real phone.

Arguments and environment values naming files under the phone's writable areas
(/data/local/tmp, /sdcard) are mapped to their host paths; the working directory is the
phone's, so relative paths resolve inside the pushed files.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig

from device_agents.emulator.phone import ScriptedPhone
from device_agents.emulator.shell import CommandContext
from native.producer import emulated_cpus_env

NAMES = ("python3", "python")
# Host variables that would let the project or the host's own settings leak in.
_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV")


def _site_dirs() -> list[str]:
    """The interpreter's own library directories (where numpy & co. are installed)."""
    dirs = [
        *site.getsitepackages(),
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    ]
    out: list[str] = []
    for d in dirs:
        if d not in out and os.path.isdir(d):
            out.append(d)
    return out


def _map(ctx: CommandContext, value: str) -> str:
    """Phone paths in writable areas (also inside ':' lists) to host paths."""
    fs = ctx.phone.fs
    return ":".join(
        str(fs.host_path(p)) if p.startswith("/") and fs.writable(p) else p
        for p in value.split(":")
    )


def make_python_command(interpreter: str | None = None):  # type: ignore[no-untyped-def]
    """A command handler running ``interpreter`` (default: this host's) as the phone's Python."""
    exe = interpreter or sys.executable
    libs = _site_dirs()

    def python(ctx: CommandContext) -> int:
        args = [_map(ctx, a) for a in ctx.argv[1:]]
        env = {k: "" for k in _DROP}  # run_host starts from this host's environment: blank them
        env.update({k: _map(ctx, v) for k, v in ctx.env.items()})
        phone_path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = ":".join(p for p in [*phone_path.split(":"), *libs] if p)
        env["PYTHONNOUSERSITE"] = "1"
        env.update(emulated_cpus_env())  # the phone's virtual CPU numbers map onto this host's
        # A python3 request is load like any program the phone runs: with the battery model
        # installed (device_agents.emulator.battery.ThreadLoad) it counts the threads it
        # keeps busy, its worker processes included.
        return ctx.run_host([exe, "-S", *args], env=env)

    return python


def enable_python(phone: ScriptedPhone, interpreter: str | None = None) -> ScriptedPhone:
    """Give ``phone`` a ``python3``/``python`` command; returns the same phone."""
    handler = make_python_command(interpreter)
    for name in NAMES:
        phone.register_command(name, handler)
    return phone
