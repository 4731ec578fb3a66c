"""Following the publication batch from the command line to the producer (issue 47).

The batch is given once on the command line (``as2d select-budget --batch 3,5``), parsed
once into method specs, and travels to the producer as a :class:`MethodSpec` — or its
wire form between processes — until the producer takes its own ``batch``. The test
follows it for real: a profiler watches every call into the project while the command
runs and, for each call, whether an argument carries the batch and in which form:

* ``MethodSpec`` — inside a spec (or an object or list holding specs: a catalog, a
  ranking, a prepared configuration);
* ``wire`` — MethodSpec's wire form (a dict with ``method`` and ``batch``);
* ``own`` — anything else: the command-line text, a parameter or variable named for the
  batch, a dict keyed ``batch`` that is not the wire form, another object with a
  ``batch`` field of its own (a policy, a deployment).

A file where the batch is in its own form is a file the batch crosses *changing form*
(it is unpacked, renamed or repacked there, and a setting added or renamed must be edited
there). The figure measured is the number of such files from the command line up to the
first call of the producer (later calls go back the same way, and what happens after —
ranking, the report — is not on the way to the producer): at most 6 on each leg.

Two legs, because the batch reaches two producers: the replay's (the selection's sweep),
and the phone's: from the deployment the selection wrote (a stored contract with its own
names, docs/formats.md; the leg starts at it as loaded) through ``eval --native``'s
commands to the runner, whose producer runs here as a thread so the profiler sees it.
The command line itself (the argument vector, the CLI framework's parse of it) is where
the first leg starts."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from as2d_cli.engine.methods import MethodSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
BATCH_TEXT = "3,5"
BATCHES = {3, 5}
LIMIT = 6
PRODUCERS = ("as2d_cli/replay/producer.py", "native/producer.py")


def _holds(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v in BATCHES
    return isinstance(v, (list, tuple)) and any(_holds(x) for x in v)


PROJECT = {"as2d_cli", "native", "device_agents"}  # the packages a crossing counts in


def _own_fields(v: Any) -> dict[str, Any]:
    """An object's own fields (dataclass fields, slots, __dict__), not its properties."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    return dict(getattr(v, "__dict__", {}) or {})


def _command_line(v: Any) -> bool:
    """The command line itself, where the batch starts: the argument vector, and the CLI
    framework's parse of it (click's context holds every option)."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v):
        return True
    return type(v).__module__.split(".")[0] in ("click", "typer")


def form(name: str, v: Any, depth: int = 0) -> str | None:
    """The form in which value ``v`` (named ``name``) carries the batch, if it does."""
    if isinstance(v, MethodSpec):
        return "MethodSpec" if v.batch in BATCHES else None
    if isinstance(v, str):
        return "own" if v == BATCH_TEXT else None
    if "batch" in name.lower() and _holds(v):
        return "own"
    if depth > 2 or _command_line(v):
        return None
    if isinstance(v, dict):
        if "batch" in v and _holds(v["batch"]):
            return "wire" if "method" in v else "own"
        items = list(v.items())
    elif isinstance(v, (list, tuple)):
        items = [(name, x) for x in v[:50]]
    else:
        fields = _own_fields(v)
        if "batch" in fields and _holds(fields["batch"]):
            return "own"
        items = list(fields.items())
    found = {form(str(k), x, depth + 1) for k, x in items} - {None}
    return min(found, key=("own", "wire", "MethodSpec").index) if found else None


class Follow:
    """A profiler recording (file, function, argument, form) of every call into the
    project that receives the batch, until the first call of a producer that does."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str]] = []
        self.reached = False

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or self.reached:
            return
        path = Path(frame.f_code.co_filename)
        if not path.is_absolute() or ROOT not in path.parents:
            return
        rel = path.relative_to(ROOT).as_posix()
        if rel.split("/")[0] not in PROJECT:  # tests, and a virtualenv inside the checkout (CI)
            return
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        for a in code.co_varnames[:n]:
            f = form(a, frame.f_locals.get(a))
            if f is not None:
                self.calls.append((rel, code.co_name, a, f))
                self.reached = self.reached or rel in PRODUCERS

    def __enter__(self) -> Follow:
        sys.setprofile(self)
        threading.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def files(self, which: str) -> list[str]:
        return sorted({c[0] for c in self.calls if c[3] == which})


def _select(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Follow, Path]:
    from as2d_cli.cli.main import main

    out = tmp_path / "deployment.yaml"
    args = ["select-budget", "--profile", str(DATA / "example-profile.yaml")]
    for split in ("dev", "val"):
        args += ["--traces", str(DATA / f"example-{split}.jsonl")]
    args += ["--budgets", "1-3", "--processes", "1", "--batch", BATCH_TEXT, "--out", str(out)]
    with Follow() as follow:
        try:
            main(args)
        except SystemExit as exc:
            assert not exc.code, capsys.readouterr().err
    return follow, out


def test_the_batch_reaches_the_replays_producer_through_few_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    follow, _ = _select(tmp_path, capsys)
    assert follow.reached, "the replay's producer never received the batch"
    own = follow.files("own")
    assert "as2d_cli/replay/producer.py" in own and "as2d_cli/cli/select_budget.py" in own
    assert len(own) <= LIMIT, own
    # Between the parse and the producer it is a MethodSpec: the selection, the sweep and
    # the replay driver never hold it in a form of their own.
    assert not {"as2d_cli/replay/selection.py", "as2d_cli/replay/sweep.py"} & set(own)
    assert {"as2d_cli/replay/selection.py", "as2d_cli/replay/sweep.py"} <= set(
        follow.files("MethodSpec")
    )


def test_the_batch_reaches_the_phones_producer_through_few_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployment the selection wrote, through ``eval --native``'s commands and the
    runner, to the native producer (a thread here, so the profiler sees it)."""
    from as2d_cli.corpus.manifest import load_corpus
    from as2d_cli.evaluate.native import native_commands
    from as2d_cli.formats.deployment_io import load_deployment
    from native.runner import Runner

    _, dep_path = _select(tmp_path, capsys)
    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    window = min(load_corpus().split("dev"), key=lambda w: w.seconds).id
    out = io.StringIO()
    runner = Runner(out)
    assert runner.handle('{"op": "load"}')
    dep = load_deployment(dep_path)  # the stored contract (as2d.deployment): the leg's start
    with Follow() as follow:
        # the example traces name the paper's sources; the runner serves its own (drafter)
        cmd = {**native_commands(dep, 24)["as2d"], "source": "drafter"}
        line = json.dumps({"op": "decode", "window": window, "max_tokens": 16, **cmd})
        runner.handle(line)
    runner.handle('{"op": "quit"}')
    events = [json.loads(x) for x in out.getvalue().splitlines()]
    result = next(e for e in events if e["event"] in ("result", "error"))
    assert result["event"] == "result" and result["batch"] in BATCHES, result
    assert follow.reached, "the native producer never received the batch"
    own = follow.files("own")
    assert "native/producer.py" in own and "as2d_cli/evaluate/native_runs.py" in own
    assert len(own) <= LIMIT, own
    # The runner's side reads it once, from the wire form, into a MethodSpec.
    assert {"native/protocol.py", "native/runner.py"} <= set(follow.files("wire"))
    assert not {"native/protocol.py", "native/runner.py"} & set(own)


def test_the_follower_sees_every_form() -> None:
    """The classification can tell the forms apart (so a regression would show)."""
    spec = MethodSpec("as2d", budget=2, source="drafter", batch=3)
    assert form("x", spec) == "MethodSpec" and form("x", [spec]) == "MethodSpec"
    assert form("cmd", spec.to_wire()) == "wire"
    assert form("batch", 3) == "own" and form("count", 3) is None
    assert form("text", BATCH_TEXT) == "own" and form("c", {"batch": 5}) == "own"
    assert form("policy", spec.policy()) == "own"  # the policy's own field
