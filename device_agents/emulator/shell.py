"""A small POSIX-ish shell for the emulated phone: quoting (single, double, backslash),
``$?``/``$VAR``, globs, ``;`` ``&&`` ``||`` ``|``, redirections (``> >> < 2> 2>&1 >&2``)
-- enough for the commands the toolkit sends (always built with shlex.quote) and for a
person typing ``adb shell``. Commands come from the phone's command table."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from device_agents.emulator.pipes import Pipe
from device_agents.emulator.vfs import normalize

if TYPE_CHECKING:
    from device_agents.emulator.phone import ScriptedPhone

Writer = Callable[[bytes], None]


class ShellSyntaxError(Exception):
    pass


@dataclass
class CommandContext:
    """What a command handler gets. Handlers return the exit status."""

    phone: ScriptedPhone
    argv: list[str]
    stdin: Pipe
    stdout: Writer
    stderr: Writer
    cwd: str
    env: dict[str, str]
    cancel: threading.Event
    affinity: int | None = None  # CPU mask requested with taskset, if any

    def out(self, text: str) -> None:
        self.stdout(text.encode())

    def err(self, text: str) -> None:
        self.stderr(text.encode())

    def path(self, p: str) -> str:
        return normalize(p, self.cwd)

    def run_host(
        self, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None
    ) -> int:
        """Run a real host program for this command, streaming stdin/stdout/stderr."""
        return run_host_program(self, argv, cwd=cwd, env=env)


Handler = Callable[[CommandContext], int]

# -- tokenizer -------------------------------------------------------------------------
# A word is a list of parts: ("lit", text) quoted literal, ("raw", text) unquoted literal
# (globbing applies), ("var", name) expanded at run time.
Part = tuple[str, str]
OPS = ("2>&1", ">&2", "&&", "||", ">>", "2>", ";", "|", ">", "<", "&")  # longest first


@dataclass
class Token:
    kind: str  # "word" | "op"
    value: str = ""
    parts: list[Part] = field(default_factory=list)


class _Lexer:
    """The word being read (its parts, whether one has started) and the tokens so far."""

    def __init__(self, src: str) -> None:
        self.src, self.n = src, len(src)
        self.tokens: list[Token] = []
        self.parts: list[Part] = []
        self.in_word = False

    def flush(self) -> None:
        if self.in_word:
            self.tokens.append(Token("word", parts=self.parts))
        self.parts, self.in_word = [], False

    def add(self, kind: str, text: str) -> None:
        self.in_word = True
        parts = self.parts
        if parts and parts[-1][0] == kind and kind != "var":
            parts[-1] = (kind, parts[-1][1] + text)
        else:
            parts.append((kind, text))

    def var_at(self, i: int) -> bool:
        """Whether ``$`` at ``i`` starts a variable reference."""
        src = self.src
        return i + 1 < self.n and (src[i + 1].isalnum() or src[i + 1] in "_{?#$")

    def read_var(self, j: int) -> tuple[str, int]:
        src, n = self.src, self.n
        if j < n and src[j] == "{":
            end = src.find("}", j)
            if end < 0:
                raise ShellSyntaxError("missing '}'")
            return src[j + 1 : end], end + 1
        if j < n and (src[j] in "?#$" or src[j].isdigit()):
            return src[j], j + 1
        k = j
        while k < n and (src[k].isalnum() or src[k] == "_"):
            k += 1
        return src[j:k], k

    def double_quoted(self, i: int) -> int:
        """The double-quoted string after the quote at ``i - 1``; returns the index after
        its closing quote."""
        src, n = self.src, self.n
        self.in_word = True
        self.add("lit", "")
        while True:
            if i >= n:
                raise ShellSyntaxError("unterminated double quote")
            d = src[i]
            if d == '"':
                return i + 1
            if d == "\\" and i + 1 < n and src[i + 1] in '$`"\\\n':
                self.add("lit", src[i + 1])
                i += 2
            elif d == "$" and self.var_at(i):
                name, i = self.read_var(i + 1)
                self.parts.append(("var", name))
            else:
                self.add("lit", d)
                i += 1


def tokenize(src: str) -> list[Token]:
    lx = _Lexer(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in " \t":
            lx.flush()
            i += 1
        elif c == "\n":
            lx.flush()
            lx.tokens.append(Token("op", ";"))
            i += 1
        elif c == "#" and not lx.in_word:
            while i < n and src[i] != "\n":
                i += 1
        elif c == "'":
            end = src.find("'", i + 1)
            if end < 0:
                raise ShellSyntaxError("unterminated single quote")
            lx.add("lit", src[i + 1 : end])
            i = end + 1
        elif c == '"':
            i = lx.double_quoted(i + 1)
        elif c == "\\":
            if i + 1 < n and src[i + 1] != "\n":
                lx.add("lit", src[i + 1])
            i += 2
        elif c == "$" and lx.var_at(i):
            name, i = lx.read_var(i + 1)
            lx.parts.append(("var", name))
            lx.in_word = True
        elif c in ";&|<>" or (c == "2" and not lx.in_word and src.startswith("2>", i)):
            lx.flush()
            for op in OPS:
                if src.startswith(op, i):
                    lx.tokens.append(Token("op", op))
                    i += len(op)
                    break
        elif c == "`" or src.startswith("$(", i):
            raise ShellSyntaxError("command substitution is not supported by the emulated phone")
        else:
            lx.add("raw", c)
            i += 1
    lx.flush()
    return lx.tokens


@dataclass
class Simple:
    words: list[list[Part]]
    redirects: list[tuple[str, list[Part] | None]]


def parse(tokens: list[Token]) -> list[tuple[str, list[Simple]]]:
    """[(connector, pipeline)], connector of the first being ';'."""
    out: list[tuple[str, list[Simple]]] = []
    connector = ";"
    pipeline: list[Simple] = []
    cur = Simple([], [])
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind == "word":
            cur.words.append(t.parts)
        elif t.value in (">", ">>", "<", "2>"):
            if i + 1 >= len(tokens) or tokens[i + 1].kind != "word":
                raise ShellSyntaxError(f"syntax error: {t.value} needs a file name")
            cur.redirects.append((t.value, tokens[i + 1].parts))
            i += 1
        elif t.value in ("2>&1", ">&2"):
            cur.redirects.append((t.value, None))
        elif t.value == "|":
            if not cur.words:
                raise ShellSyntaxError("syntax error near '|'")
            pipeline.append(cur)
            cur = Simple([], [])
        elif t.value in (";", "&&", "||"):
            if cur.words:
                pipeline.append(cur)
            if pipeline:
                out.append((connector, pipeline))
            elif t.value != ";":
                raise ShellSyntaxError(f"syntax error near '{t.value}'")
            connector, pipeline, cur = t.value, [], Simple([], [])
        elif t.value == "&":
            raise ShellSyntaxError("background jobs (&) are not supported by the emulated phone")
        i += 1
    if cur.words:
        pipeline.append(cur)
    if pipeline:
        out.append((connector, pipeline))
    return out


class Interpreter:
    """Runs one script (one adb shell invocation) against a phone."""

    def __init__(
        self,
        phone: ScriptedPhone,
        stdin: Pipe,
        stdout: Writer,
        stderr: Writer,
        cancel: threading.Event,
        cwd: str = "/",
    ) -> None:
        self.phone = phone
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.cancel = cancel
        self.cwd = cwd
        self.env: dict[str, str] = {"PATH": "/system/bin", "HOME": "/", "TMPDIR": "/data/local/tmp"}
        self.status = 0
        self.exited = False

    def run(self, script: str) -> int:
        try:
            program = parse(tokenize(script))
        except ShellSyntaxError as exc:
            self.stderr(f"/system/bin/sh: {exc}\n".encode())
            return 2
        for connector, pipeline in program:
            if self.exited or self.cancel.is_set():
                break
            if connector == "&&" and self.status != 0:
                continue
            if connector == "||" and self.status == 0:
                continue
            self.status = self._pipeline(pipeline)
        return self.status

    def expand(self, word: list[Part]) -> list[str]:
        text, globbing = "", False
        for kind, value in word:
            if kind == "var":
                text += str(self.status) if value == "?" else self.env.get(value, "")
            else:
                text += value
                globbing = globbing or (kind == "raw" and any(ch in value for ch in "*?["))
        if globbing:
            matches = self.phone.fs.glob(text, self.cwd)
            if matches:
                return matches
        return [text]

    def _pipeline(self, pipeline: list[Simple]) -> int:
        status = 0
        data_in: Pipe = self.stdin
        for idx, cmd in enumerate(pipeline):
            last = idx == len(pipeline) - 1
            buf = bytearray()
            out: Writer = self.stdout if last else buf.extend
            status = self._simple(cmd, data_in, out)
            if not last:
                data_in = Pipe(bytes(buf), closed=True)
        return status

    def _simple(self, cmd: Simple, stdin: Pipe, stdout: Writer) -> int:
        argv: list[str] = []
        for w in cmd.words:
            argv.extend(self.expand(w))
        stderr = self.stderr
        files: list[tuple[str, bytearray, bool]] = []
        for op, target in cmd.redirects:
            if op == "2>&1":
                stderr = stdout
                continue
            if op == ">&2":
                stdout = self.stderr
                continue
            path = normalize(self.expand(target or [])[0], self.cwd)
            if op == "<":
                if path == "/dev/null":
                    stdin = Pipe(b"", closed=True)
                    continue
                try:
                    stdin = Pipe(self.phone.fs.read_file(path), closed=True)
                except OSError as exc:
                    self.stderr(f"/system/bin/sh: {exc}\n".encode())
                    return 1
                continue
            if path == "/dev/null":
                if op == "2>":
                    stderr = lambda _d: None  # noqa: E731
                else:
                    stdout = lambda _d: None  # noqa: E731
                continue
            sink = bytearray()
            files.append((path, sink, op == ">>"))
            if op == "2>":
                stderr = sink.extend
            else:
                stdout = sink.extend
        for path, _, append in files:  # create/truncate before running, like sh
            err = (
                self.phone.fs.write_file(path, b"", append=True)
                if append
                else self.phone.fs.write_file(path, b"")
            )
            if err:
                self.stderr(f"/system/bin/sh: can't create {err}\n".encode())
                return 1
        if not argv:
            return 0
        status = self.dispatch(argv, stdin, stdout, stderr, affinity=None)
        for path, sink, _ in files:
            self.phone.fs.write_file(path, bytes(sink), append=True)
        return status

    def dispatch(
        self, argv: list[str], stdin: Pipe, stdout: Writer, stderr: Writer, affinity: int | None
    ) -> int:
        ctx = CommandContext(
            self.phone, argv, stdin, stdout, stderr, self.cwd, self.env, self.cancel, affinity
        )
        name = argv[0]
        if name == "cd":
            target = normalize(argv[1] if len(argv) > 1 else "/", self.cwd)
            if not self.phone.fs.is_dir(target):
                ctx.err(f"/system/bin/sh: cd: {target}: No such file or directory\n")
                return 2
            self.cwd = target
            return 0
        if name == "exit":
            self.exited = True
            return int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else self.status
        if name == "export":
            for item in argv[1:]:
                key, _, value = item.partition("=")
                self.env[key] = value
            return 0
        return self.phone.execute(ctx)


def run_host_program(
    ctx: CommandContext, argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None
) -> int:
    """Run a real host process as this command: stdin/stdout/stderr stream through the adb
    stream, the process group is killed when the host closes the stream, and a taskset
    mask is folded onto the host's CPUs (phone CPU i -> host CPU i mod n)."""
    import os

    full_env = dict(os.environ)
    full_env.update(ctx.env)
    full_env["AS2D_EMULATED_ROOT"] = str(ctx.phone.fs.root)
    if env:
        full_env.update(env)
    host_cwd = cwd or str(ctx.phone.fs.host_path(ctx.cwd))
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=host_cwd,
        env=full_env,
        start_new_session=True,
    )
    ctx.phone.process_started(proc.pid)
    try:
        return _attend(ctx, proc)
    finally:
        ctx.phone.process_ended(proc.pid)


def _attend(ctx: CommandContext, proc: subprocess.Popen[bytes]) -> int:
    """Pin, stream and wait for a started host process; kill its group when cancelled."""
    import os
    import signal

    if ctx.affinity is not None:
        host_cpus = sorted(os.sched_getaffinity(0))
        cpus = {host_cpus[c % len(host_cpus)] for c in range(64) if ctx.affinity >> c & 1}
        try:
            os.sched_setaffinity(proc.pid, cpus)
        except OSError:
            pass

    def pump_out(src, write: Writer) -> None:  # type: ignore[no-untyped-def]
        try:
            while True:
                chunk = src.read1(65536)
                if not chunk:
                    return
                write(chunk)
        except Exception:
            ctx.cancel.set()

    def pump_in() -> None:
        sink = proc.stdin
        assert sink is not None  # started with stdin=PIPE
        try:
            while proc.poll() is None:
                chunk = ctx.stdin.read1(timeout=0.1)
                if chunk:
                    sink.write(chunk)
                    sink.flush()
                elif ctx.stdin.at_eof:
                    break
        except (BrokenPipeError, OSError, ValueError):
            pass
        finally:
            try:
                sink.close()
            except OSError:
                pass

    threads = [
        threading.Thread(target=pump_out, args=(proc.stdout, ctx.stdout), daemon=True),
        threading.Thread(target=pump_out, args=(proc.stderr, ctx.stderr), daemon=True),
        threading.Thread(target=pump_in, daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        while True:
            try:
                proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if ctx.cancel.is_set():
                    os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for t in threads[:2]:
        t.join(timeout=2)
    code = proc.returncode
    return 128 - code if code < 0 else code


def interactive(phone: ScriptedPhone, stdin: Pipe, write: Writer, cancel: threading.Event) -> int:
    """`adb shell` with no command: a prompt, simple line editing (the client's terminal is
    raw, so the phone echoes), one script per line until `exit` or Ctrl-D."""

    def crlf(data: bytes) -> None:
        write(data.replace(b"\n", b"\r\n"))

    sh = Interpreter(phone, Pipe(b"", closed=True), crlf, crlf, cancel)
    device = phone.props.get("ro.product.device", "phone")

    def prompt() -> None:
        write(f"{device}:{sh.cwd} $ ".encode())

    prompt()
    line = bytearray()
    while not cancel.is_set():
        chunk = stdin.read1(timeout=0.2)
        if not chunk:
            if stdin.at_eof:
                break
            continue
        for b in chunk:
            if b in (10, 13):
                write(b"\r\n")
                sh.run(line.decode("utf-8", "replace"))
                line.clear()
                if sh.exited:
                    return sh.status
                prompt()
            elif b in (8, 127):
                if line:
                    line.pop()
                    write(b"\b \b")
            elif b == 3:
                line.clear()
                write(b"^C\r\n")
                prompt()
            elif b == 4 and not line:
                return sh.status
            else:
                line.append(b)
                write(bytes([b]))
    return sh.status
