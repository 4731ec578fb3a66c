"""The emulated phone's shell, run directly (no adb): quoting, operators, redirections,
variables, globs, errors -- the behaviour the toolkit's commands rely on."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterator

import pytest

from device_agents.emulator.phone import ScriptedPhone
from device_agents.emulator.pipes import Pipe


@pytest.fixture(scope="module")
def phone() -> Iterator[ScriptedPhone]:
    p = ScriptedPhone()
    try:
        yield p
    finally:
        p.close()


def sh(phone: ScriptedPhone, script: str, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = bytearray(), bytearray()
    code = phone.run_script(
        script, Pipe(stdin, closed=True), out.extend, err.extend, threading.Event()
    )
    return code, out.decode(), err.decode()


@pytest.mark.parametrize(
    "word",
    [
        "plain",
        "two words",
        "it's",
        'say "hi"',
        "$HOME",
        "a;b&&c|d",
        "back\\slash",
        "*",
        "~",
        "tab\there",
        "",
        "ünïcödé",
        "`id`",
        "$(id)",
    ],
)
def test_shlex_quoted_words_come_back_verbatim(phone: ScriptedPhone, word: str) -> None:
    code, out, _ = sh(phone, shlex.join(["echo", word]))
    assert code == 0 and out == word + "\n"


def test_sequencing_and_conditionals(phone: ScriptedPhone) -> None:
    assert sh(phone, "false && echo no; echo yes")[1] == "yes\n"
    assert sh(phone, "false || echo fallback")[1] == "fallback\n"
    assert sh(phone, "true && false; echo $?")[1] == "1\n"
    assert sh(phone, "exit 7; echo unreachable") == (7, "", "")


def test_pipes_and_redirections(phone: ScriptedPhone) -> None:
    d = "/data/local/tmp/shtest"
    assert (
        sh(phone, f"mkdir -p {d} && echo one > {d}/f && echo two >> {d}/f && cat < {d}/f")[1]
        == "one\ntwo\n"
    )
    assert sh(phone, f"cat {d}/f | grep tw")[1] == "two\n"
    code, out, err = sh(phone, "ls /missing 2>/dev/null; echo after")
    assert (out, err) == ("after\n", "")
    assert sh(phone, "ls /missing 2>&1")[1] == "ls: /missing: No such file or directory\n"
    assert sh(phone, "echo to-err >&2") == (0, "", "to-err\n")
    assert sh(phone, f"ls {d}/*")[1] == f"{d}/f\n"
    assert sh(phone, f"rm -r {d} && test -e {d}; echo $?")[1] == "1\n"


def test_variables_and_cd(phone: ScriptedPhone) -> None:
    assert sh(phone, 'export X="a b"; echo "[$X]" ${X}')[1] == "[a b] a b\n"
    assert sh(phone, "cd /sys/class/thermal && ls")[1].startswith("thermal_zone0\n")


def test_unsupported_syntax_is_a_clear_error(phone: ScriptedPhone) -> None:
    code, _, err = sh(phone, "echo $(id)")
    assert code == 2 and "command substitution is not supported" in err
    code, _, err = sh(phone, "sleep 1 &")
    assert code == 2 and "background jobs" in err
    code, _, err = sh(phone, "nosuchcmd")
    assert code == 127 and "nosuchcmd: inaccessible or not found" in err


def test_getprop_dumpsys_and_sysfs(phone: ScriptedPhone) -> None:
    assert sh(phone, "getprop ro.product.model")[1] == "23117RK66C\n"
    assert "[ro.soc.model]: [SM8650]" in sh(phone, "getprop")[1]
    assert "level: 82" in sh(phone, "dumpsys battery")[1]
    assert sh(phone, "cat /sys/devices/system/cpu/cpu7/cpufreq/cpuinfo_max_freq")[1] == "3302400\n"
    assert sh(phone, "cat /sys/devices/system/cpu/cpu3/cpufreq/related_cpus")[1] == "2 3 4\n"


def test_running_files_needs_the_exec_bit(phone: ScriptedPhone) -> None:
    d = "/data/local/tmp/shexec"
    sh(phone, f"mkdir -p {d} && echo data > {d}/plain")
    code, _, err = sh(phone, f"{d}/plain")
    assert code == 126 and "can't execute: Permission denied" in err
    code, _, err = sh(phone, f"{d}/missing")
    assert code == 127 and "inaccessible or not found" in err
    sh(phone, f"rm -r {d}")
