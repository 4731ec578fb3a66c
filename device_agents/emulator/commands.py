"""Built-in commands of the emulated phone (toybox/mksh look-alikes). Each is a handler
``(ctx: CommandContext) -> int`` in :data:`BUILTINS`; a phone copies the table, and other
modules add or replace entries with ``ScriptedPhone.register_command``."""

from __future__ import annotations

import hashlib
import posixpath
import re
import stat

from device_agents.emulator.pipes import Pipe
from device_agents.emulator.shell import CommandContext, Handler, Interpreter


def _true(ctx: CommandContext) -> int:
    return 0


def _false(ctx: CommandContext) -> int:
    return 1


def _echo(ctx: CommandContext) -> int:
    args = ctx.argv[1:]
    newline = True
    if args and args[0] == "-n":
        newline, args = False, args[1:]
    ctx.out(" ".join(args) + ("\n" if newline else ""))
    return 0


def _cat(ctx: CommandContext) -> int:
    if len(ctx.argv) == 1:
        while True:
            chunk = ctx.stdin.read1()
            if not chunk:
                return 0
            ctx.stdout(chunk)
    status = 0
    for name in ctx.argv[1:]:
        try:
            ctx.stdout(ctx.phone.fs.read_file(ctx.path(name)))
        except OSError as exc:
            ctx.err(f"cat: {exc}\n")
            status = 1
    return status


def _read(ctx: CommandContext) -> int:
    """``read NAME...``: one line of stdin into shell variables (the last takes the rest);
    1 at end of input with nothing read, as sh's."""
    names = [a for a in ctx.argv[1:] if not a.startswith("-")]
    line = b""
    while not line.endswith(b"\n"):
        ch = ctx.stdin.read(1)
        if not ch:
            break
        line += ch
    words = line.decode(errors="replace").strip().split(None, max(len(names) - 1, 0))
    for i, name in enumerate(names):
        ctx.env[name] = words[i] if i < len(words) else ""
    return 0 if line else 1


def _flags(argv: list[str]) -> tuple[set[str], list[str]]:
    flags: set[str] = set()
    rest: list[str] = []
    for a in argv:
        if a.startswith("-") and len(a) > 1 and not rest:
            flags.update(a[1:])
        else:
            rest.append(a)
    return flags, rest


def _ls(ctx: CommandContext) -> int:
    flags, paths = _flags(ctx.argv[1:])
    status = 0
    for p in paths or ["."]:
        v = ctx.path(p)
        st = ctx.phone.fs.stat(v)
        if st is None:
            ctx.err(f"ls: {v}: No such file or directory\n")
            status = 1
        elif stat.S_ISDIR(st[0]):
            for name, _ in ctx.phone.fs.listdir(v):
                if not name.startswith(".") or "a" in flags:
                    ctx.out(name + "\n")
        else:
            ctx.out(p + "\n")
    return status


def _mkdir(ctx: CommandContext) -> int:
    flags, paths = _flags(ctx.argv[1:])
    status = 0
    for p in paths:
        err = ctx.phone.fs.mkdir(ctx.path(p), parents="p" in flags)
        if err:
            ctx.err(f"mkdir: {err}\n")
            status = 1
    return status


def _rm(ctx: CommandContext) -> int:
    flags, paths = _flags(ctx.argv[1:])
    status = 0
    for p in paths:
        err = ctx.phone.fs.remove(ctx.path(p), recursive="r" in flags or "R" in flags)
        if err and not ("f" in flags and "No such file" in err):
            ctx.err(f"rm: {err}\n")
            status = 1
    return status


def _touch(ctx: CommandContext) -> int:
    status = 0
    for p in ctx.argv[1:]:
        err = ctx.phone.fs.write_file(ctx.path(p), b"", append=True)
        if err:
            ctx.err(f"touch: {err}\n")
            status = 1
    return status


def _chmod(ctx: CommandContext) -> int:
    if len(ctx.argv) < 3:
        ctx.err("chmod: needs MODE FILE...\n")
        return 1
    spec, status = ctx.argv[1], 0
    for p in ctx.argv[2:]:
        v = ctx.path(p)
        st = ctx.phone.fs.stat(v)
        if st is None:
            ctx.err(f"chmod: {v}: No such file or directory\n")
            status = 1
            continue
        if re.fullmatch(r"[0-7]{3,4}", spec):
            mode = int(spec, 8)
        elif spec in ("+x", "a+x", "u+x"):
            mode = stat.S_IMODE(st[0]) | (0o100 if spec == "u+x" else 0o111)
        else:
            ctx.err(f"chmod: unsupported mode {spec}\n")
            return 1
        err = ctx.phone.fs.chmod(v, mode)
        if err:
            ctx.err(f"chmod: {err}\n")
            status = 1
    return status


def _getprop(ctx: CommandContext) -> int:
    props = ctx.phone.props
    if len(ctx.argv) == 1:
        for k in sorted(props):
            ctx.out(f"[{k}]: [{props[k]}]\n")
    else:
        default = ctx.argv[2] if len(ctx.argv) > 2 else ""
        ctx.out(props.get(ctx.argv[1], default) + "\n")
    return 0


def _sleep(ctx: CommandContext) -> int:
    try:
        seconds = float(ctx.argv[1])
    except (IndexError, ValueError):
        ctx.err("sleep: needs a number of seconds\n")
        return 1
    return 130 if ctx.cancel.wait(seconds) else 0


def _test(ctx: CommandContext) -> int:
    args = ctx.argv[1:]
    if ctx.argv[0] == "[":
        if not args or args[-1] != "]":
            ctx.err("[: missing ]\n")
            return 2
        args = args[:-1]
    negate = bool(args) and args[0] == "!"
    if negate:
        args = args[1:]
    fs = ctx.phone.fs
    result: bool
    if len(args) == 2 and args[0] in ("-e", "-f", "-d", "-x", "-s"):
        st = fs.stat(ctx.path(args[1]))
        op = args[0]
        result = st is not None and (
            op == "-e"
            or (op == "-f" and stat.S_ISREG(st[0]))
            or (op == "-d" and stat.S_ISDIR(st[0]))
            or (op == "-x" and bool(st[0] & 0o111))
            or (op == "-s" and st[1] > 0)
        )
    elif len(args) == 2 and args[0] in ("-n", "-z"):
        result = bool(args[1]) == (args[0] == "-n")
    elif len(args) == 3 and args[1] in ("=", "!="):
        result = (args[0] == args[2]) == (args[1] == "=")
    elif len(args) == 3 and args[1] in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
        a, b = int(args[0]), int(args[2])
        result = {
            "-eq": a == b,
            "-ne": a != b,
            "-lt": a < b,
            "-le": a <= b,
            "-gt": a > b,
            "-ge": a >= b,
        }[args[1]]
    elif len(args) == 1:
        result = bool(args[0])
    else:
        ctx.err("test: unsupported expression\n")
        return 2
    return 0 if result != negate else 1


def _dumpsys(ctx: CommandContext) -> int:
    service = ctx.argv[1] if len(ctx.argv) > 1 else ""
    if service == "battery":
        ctx.out(ctx.phone.battery.dumpsys())
        return 0
    ctx.err(f"Can't find service: {service}\n")
    return 1


def _taskset(ctx: CommandContext) -> int:
    args = ctx.argv[1:]
    if not args or args[0].startswith("-"):
        ctx.err("taskset: only 'taskset MASK COMMAND...' is supported by the emulated phone\n")
        return 1
    try:
        mask = int(args[0], 16)
    except ValueError:
        ctx.err(f"taskset: bad mask '{args[0]}'\n")
        return 1
    if not mask & ctx.phone.online_mask():
        ctx.err("taskset: sched_setaffinity: Invalid argument\n")
        return 1
    if len(args) < 2:
        ctx.err("taskset: needs a command\n")
        return 1
    ctx.phone.affinity_log.append((mask, args[1:]))
    inner = Interpreter(ctx.phone, ctx.stdin, ctx.stdout, ctx.stderr, ctx.cancel, ctx.cwd)
    inner.env = ctx.env
    return inner.dispatch(args[1:], ctx.stdin, ctx.stdout, ctx.stderr, affinity=mask)


def _sh(ctx: CommandContext) -> int:
    args = ctx.argv[1:]
    if len(args) >= 2 and args[0] == "-c":
        inner = Interpreter(ctx.phone, ctx.stdin, ctx.stdout, ctx.stderr, ctx.cancel, ctx.cwd)
        inner.env = dict(ctx.env)
        return inner.run(args[1])
    if args:
        try:
            script = ctx.phone.fs.read_file(ctx.path(args[0])).decode()
        except OSError as exc:
            ctx.err(f"sh: {exc}\n")
            return 127
        inner = Interpreter(ctx.phone, ctx.stdin, ctx.stdout, ctx.stderr, ctx.cancel, ctx.cwd)
        return inner.run(script)
    inner = Interpreter(
        ctx.phone, Pipe(b"", closed=True), ctx.stdout, ctx.stderr, ctx.cancel, ctx.cwd
    )
    return inner.run(ctx.stdin.read().decode())


def _grep(ctx: CommandContext) -> int:
    flags, rest = _flags(ctx.argv[1:])
    if not rest:
        ctx.err("grep: needs a PATTERN\n")
        return 2
    pattern, files = re.compile(rest[0]), rest[1:]
    show_name = "H" in flags or (len(files) > 1 and "h" not in flags)
    found, status = False, 0
    sources: list[tuple[str, bytes]] = []
    if not files:
        sources.append(("(standard input)", ctx.stdin.read()))
    for f in files:
        try:
            sources.append((f, ctx.phone.fs.read_file(ctx.path(f))))
        except OSError as exc:
            if "s" not in flags:
                ctx.err(f"grep: {exc}\n")
            status = 2
    for name, data in sources:
        for line in data.decode("utf-8", "replace").splitlines():
            if bool(pattern.search(line)) != ("v" in flags):
                found = True
                if "q" not in flags:
                    ctx.out(f"{name}:{line}\n" if show_name else f"{line}\n")
    return 0 if found else (status or 1)


def _digest(ctx: CommandContext) -> int:
    algo = "sha256" if ctx.argv[0].startswith("sha256") else "md5"
    status = 0
    for p in ctx.argv[1:]:
        try:
            data = ctx.phone.fs.read_file(ctx.path(p))
        except OSError as exc:
            ctx.err(f"{ctx.argv[0]}: {exc}\n")
            status = 1
            continue
        ctx.out(f"{hashlib.new(algo, data).hexdigest()}  {p}\n")
    return status


def _uname(ctx: CommandContext) -> int:
    flags, _ = _flags(ctx.argv[1:])
    if "a" in flags:
        ctx.out("Linux localhost 6.1.75-android14-11 #1 SMP PREEMPT aarch64 Toybox\n")
    elif "m" in flags:
        ctx.out("aarch64\n")
    elif "r" in flags:
        ctx.out("6.1.75-android14-11\n")
    else:
        ctx.out("Linux\n")
    return 0


def _nproc(ctx: CommandContext) -> int:
    ctx.out(f"{bin(ctx.phone.online_mask()).count('1')}\n")
    return 0


def _basename(ctx: CommandContext) -> int:
    ctx.out(posixpath.basename(ctx.argv[1].rstrip("/")) + "\n" if len(ctx.argv) > 1 else "\n")
    return 0


BUILTINS: dict[str, Handler] = {
    "true": _true,
    "false": _false,
    "echo": _echo,
    "cat": _cat,
    "ls": _ls,
    "mkdir": _mkdir,
    "rm": _rm,
    "touch": _touch,
    "chmod": _chmod,
    "getprop": _getprop,
    "sleep": _sleep,
    "read": _read,
    "test": _test,
    "[": _test,
    "dumpsys": _dumpsys,
    "taskset": _taskset,
    "sh": _sh,
    "grep": _grep,
    "sha256sum": _digest,
    "md5sum": _digest,
    "uname": _uname,
    "nproc": _nproc,
    "basename": _basename,
}
