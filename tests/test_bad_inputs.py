"""Realistic mistakes a new user makes, one test each: a hand-edited or unit-slipped cost
profile, a key written twice in a profile, deployment or trace, a candidates file out of
order or in another vocabulary, an audio file that is cut, empty or not audio, an option
given for a method that has none, a mistyped phone name, a models folder that is not a
pair. Each is refused in one line (exit 2, no traceback, one ``error:`` line on stderr
through the CLI) with nothing written or changed, or — where the input is right after
all — accepted. Checked by issue 45's "inputs checked for meaning" suite."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from test_cli_bad_input import run, snapshot

from as2d_cli.errors import FormatError, UserError

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
PROFILE = "profile.yaml"  # the replay example: the K70 constants, widths K1..K13
TRACES = "traces.jsonl.gz"


# ------------------------------------------------------------------ helpers


def _closed_port() -> int:
    """A local port nothing listens on: no adb server there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the replay and eval examples; commands run in it, with no adb
    server reachable (phone names are resolved without one)."""
    shutil.copy(DATA / "replay" / "profile.yaml", tmp_path / PROFILE)
    shutil.copy(DATA / "replay" / "traces.jsonl.gz", tmp_path / TRACES)
    shutil.copy(DATA / "example-test.jsonl", tmp_path / "test.jsonl")
    shutil.copy(DATA / "example-profile.yaml", tmp_path / "example-profile.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(_closed_port()))
    return tmp_path


def refused(work: Path, capsys: pytest.CaptureFixture[str], args: list[str], *needles: str) -> str:
    """Run ``args``: exit 2, one ``error:`` line holding every needle, no traceback, nothing
    on stdout, nothing in the working folder written or changed. Returns the line."""
    before = snapshot(work)
    code, out, err = run(args, capsys)
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert code == 2, (code, err)
    assert lines[0].startswith("error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert out == ""
    assert snapshot(work) == before
    return lines[0]


def edit(path: Path, old: str, new: str, count: int = 1) -> Path:
    """Replace ``old`` in the file as a person editing it would (it must be there)."""
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))
    return path


def replay_args(profile: str = PROFILE, *extra: str) -> list[str]:
    return ["replay", "--profile", profile, "--traces", TRACES, *extra]


# ------------------------------------------------------------------ profiles


# (case, text in the replay profile, what a person wrote instead, what the line names)
PROFILE_EDITS = [
    (  # a verifier cost hand-lowered below a narrower width's
        "verify-falls-with-k",
        "K6: 97.528417",
        "K6: 40.0",
        ["costs.verify.idle_ms.K6", "K5", "--allow-implausible"],
    ),
    (  # idle ÷ concurrent instead of concurrent ÷ idle: the other model would speed it up
        "verify-ratio-inverted",
        "K3: 1.091667",
        "K3: 0.82",
        ["costs.verify.concurrent_ratio.K3", "below 1"],
    ),
    (
        "source-ratio-below-1",
        "concurrent_ratio: 1.12",
        "concurrent_ratio: 0.5",
        ["costs.sources.qwen.concurrent_ratio", "below 1"],
    ),
    (
        "target-step-in-seconds",
        "target_step_ms: 59.391",
        "target_step_ms: 0.059391",
        ["costs.target_step_ms", "unit slip"],
    ),
    (
        "verify-in-microseconds",
        "K13: 150.353704",
        "K13: 150353.704",
        ["costs.verify.idle_ms.K13", "0.01–10000 ms"],
    ),
    (
        "startup-enormous",
        "startup_ms: 30.0",
        "startup_ms: 3000000.0",
        ["costs.sources.qwen.startup_ms", "plausible"],
    ),
    (
        "in-loop-ratio-out-of-range",
        "  align_ms: 0.3\n",
        "  align_ms: 0.3\n  in_loop:\n    sd: {verify: 40}\n",
        ["costs.in_loop.sd.verify", "0.1–10"],
    ),
]


@pytest.mark.parametrize(
    "old,new,needles", [c[1:] for c in PROFILE_EDITS], ids=[c[0] for c in PROFILE_EDITS]
)
def test_an_implausible_profile_is_refused_naming_the_field(
    work, capsys, old: str, new: str, needles: list[str]
) -> None:
    edit(work / PROFILE, old, new)
    refused(work, capsys, replay_args(), "profile.yaml: implausible profile", *needles)


def test_a_nan_cost_is_refused_even_with_allow_implausible(work, capsys) -> None:
    edit(work / PROFILE, "loop_ms: 10.738", "loop_ms: .nan")
    refused(work, capsys, replay_args(PROFILE, "--allow-implausible"), "costs.loop_ms", "finite")


def test_a_profile_key_written_twice_is_refused_with_both_lines(work, capsys) -> None:
    edit(work / PROFILE, "  loop_ms: 10.738\n", "  loop_ms: 10.738\n  loop_ms: 1.0\n")
    refused(work, capsys, replay_args(), "line 18", "'loop_ms' is written twice", "line 17")


def test_an_empty_profile_file_is_refused(work, capsys) -> None:
    (work / "empty.yaml").write_text("")
    refused(work, capsys, replay_args("empty.yaml"), "empty.yaml", "empty")


def test_select_budget_refuses_an_implausible_profile_before_any_sweep(work, capsys) -> None:
    edit(work / PROFILE, "K6: 97.528417", "K6: 40.0")
    refused(
        work,
        capsys,
        ["select-budget", "--profile", PROFILE, "--traces", TRACES, "--budgets", "1-4"],
        "costs.verify.idle_ms.K6",
    )
    assert not (work / "calibrations").exists()


def test_allow_implausible_runs_and_records_the_override(work, capsys) -> None:
    edit(work / PROFILE, "K6: 97.528417", "K6: 40.0")
    code, out, err = run(
        replay_args(PROFILE, "--method", "sd", "--k", "8", "--json", "--allow-implausible"),
        capsys,
    )
    assert code == 0, err
    assert err.startswith("warning: ") and "costs.verify.idle_ms.K6" in err
    rep = json.loads(out)
    assert any("costs.verify.idle_ms.K6" in p for p in rep["allowed_implausible"])


def test_allow_implausible_goes_into_the_stored_results(work, capsys) -> None:
    edit(work / PROFILE, "K3: 1.091667", "K3: 0.82")
    code, _, err = run(
        replay_args(PROFILE, "--method", "target-only", "--out", "r.json", "--allow-implausible"),
        capsys,
    )
    assert code == 0, err
    doc = json.loads((work / "r.json").read_text())
    assert any("concurrent_ratio.K3" in p for p in doc["results"]["allowed_implausible"])


@pytest.mark.parametrize(
    "path",
    [
        "as2d_cli/assets/profiles/k70.profile.yaml",
        "tests/data/example-profile.yaml",
        "tests/data/replay/profile.yaml",
    ],
)
def test_every_shipped_profile_is_plausible(path: str) -> None:
    from as2d_cli.formats.profile_io import load_profile

    p = load_profile(REPO / path, check=True)
    assert p.allowed_implausible == ()


def test_the_synthetic_profiles_tests_build_are_plausible() -> None:
    from as2d_cli.formats.profile import implausibilities
    from as2d_cli.synthetic import synthetic_profile

    for width in (8, 13, 25):
        assert implausibilities(synthetic_profile(width)) == []


def test_a_dip_within_the_measured_noise_is_accepted() -> None:
    """A calibration on a busy host: K16's median under K15's by less than their samples
    spread, ratios a little under 1 — noise, not an implausible device."""
    from as2d_cli.formats.profile import Fit, implausibilities
    from as2d_cli.synthetic import synthetic_profile

    p = synthetic_profile(16)
    idle = {**p.verify_idle_ms, 16: p.verify_idle_ms[15] * 0.97}
    samples = {
        "verify.K15": (p.verify_idle_ms[15] * 0.95, p.verify_idle_ms[15] * 1.05),
        "verify.K16": (idle[16] * 0.96, idle[16] * 1.04),
    }
    p = dataclasses.replace(
        p,
        verify_idle_ms=idle,
        verify_concurrent_ratio={k: 0.97 for k in idle},
        fit=Fit("median of measured calls", samples),
    )
    assert implausibilities(p) == []
    # The same dip, three times as deep, is more than those samples' spread.
    deeper = dataclasses.replace(p, verify_idle_ms={**idle, 16: p.verify_idle_ms[15] * 0.85})
    assert any("K16" in x for x in implausibilities(deeper))


# ------------------------------------------------------------------ deployments, traces


def test_a_deployment_with_a_budget_written_twice_is_refused(work, capsys) -> None:
    from as2d_cli.formats.deployment_io import make_deployment, write_deployment

    dep = write_deployment(
        work / "dep.yaml",
        make_deployment("qwen", 5, 0.4, 8, work / PROFILE, "k70-synthetic", {}, align="suffix"),
    )
    edit(dep, "  budget: 5\n", "  budget: 5\n  budget: 12\n")
    refused(work, capsys, replay_args(PROFILE, "--deployment", "dep.yaml"), "dep.yaml", "'budget'")


def test_a_trace_record_with_a_key_written_twice_is_refused(work, capsys) -> None:
    edit(
        work / "test.jsonl",
        '{"id":"test-librispeech-0001",',
        '{"id":"test-librispeech-0001","language":"de",',
    )
    refused(
        work,
        capsys,
        ["replay", "--profile", "example-profile.yaml", "--traces", "test.jsonl"],
        "test.jsonl: line 3",
        "'language' is written twice",
    )


def test_a_trace_header_with_a_key_written_twice_is_refused(work, capsys) -> None:
    edit(work / "test.jsonl", '"windows":7,', '"windows":7,"windows":6,')
    refused(
        work,
        capsys,
        ["replay", "--profile", "example-profile.yaml", "--traces", "test.jsonl"],
        "line 1",
        "'windows'",
    )


def test_a_corpus_manifest_with_a_split_written_twice_is_refused(work, capsys) -> None:
    """A window moved to another split by adding a line instead of changing one."""
    from as2d_cli.corpus.manifest import DEFAULT_DIR

    (work / "corpus").mkdir()
    text = (DEFAULT_DIR / "manifest.json").read_text()
    first = text.index('"split"')
    (work / "corpus" / "manifest.json").write_text(
        text[:first] + '"split": "test", ' + text[first:]
    )
    refused(
        work,
        capsys,
        ["corpus", "list", "--corpus", "corpus"],
        "manifest.json",
        "'split' is written twice",
    )


# ------------------------------------------------------------------ candidates


def _candidates(work: Path, *lines: str) -> list[str]:
    (work / "c.jsonl").write_text("".join(line + "\n" for line in lines))
    return ["decode", "--window", "test-read-000", "--candidates", "c.jsonl"]


def test_candidates_outside_the_pairs_vocabulary_are_refused(work, capsys) -> None:
    """Token ids of another tokenizer (Qwen's 151,645) for the bundled pair."""
    args = _candidates(work, '{"t_ms": 0, "tokens": [5, 6]}', '{"t_ms": 12, "tokens": [151645]}')
    refused(work, capsys, args, "c.jsonl:2", "token 151645", "outside the target vocabulary")


def test_candidates_out_of_time_order_are_refused(work, capsys) -> None:
    args = _candidates(work, '{"t_ms": 40, "tokens": [5]}', '{"t_ms": 10, "tokens": [6]}')
    refused(work, capsys, args, "c.jsonl:2", "earlier than line 1", "sort the lines by t_ms")


def test_a_candidate_time_that_is_not_finite_is_refused(work, capsys) -> None:
    args = _candidates(work, '{"t_ms": NaN, "tokens": [5]}')
    refused(work, capsys, args, "c.jsonl:1", "finite")


def test_a_candidate_batch_with_a_key_written_twice_is_refused(work, capsys) -> None:
    args = _candidates(work, '{"t_ms": 3, "tokens": [5], "tokens": [7]}')
    refused(work, capsys, args, "c.jsonl:1", "'tokens' is written twice")


def test_an_empty_candidates_file_is_refused(work, capsys) -> None:
    args = _candidates(work, "")
    refused(work, capsys, args, "c.jsonl", "holds no candidate batches")


def test_candidates_for_a_serial_method_are_refused(work, capsys) -> None:
    args = [*_candidates(work, '{"t_ms": 0, "tokens": [5]}'), "--method", "sd"]
    refused(work, capsys, args, "--candidates", "method sd has none", "as2d or as2d-no-bc")


def test_ordered_candidates_in_the_vocabulary_are_accepted(work) -> None:
    from as2d_cli.models.model_pair import load_pair
    from native.candidates import load_candidates

    vocab = load_pair(check_hashes=False).vocab.size
    (work / "c.jsonl").write_text(
        '{"t_ms": 0, "tokens": [5, 6]}\n\n{"t_ms": 0, "tokens": []}\n{"t_ms": 7.5, "tokens": [9]}\n'
    )
    got = load_candidates(work / "c.jsonl", vocab_size=vocab)
    assert [b["t_ms"] for b in got] == [0.0, 0.0, 7.5]


# ------------------------------------------------------------------ audio


def _stream(audio: str, *extra: str) -> list[str]:
    return ["stream", "--audio", audio, "--out", "r", *extra]


def _wav(path: Path, seconds: float, rate: int = 16_000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(str(path), (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)
    return path


def test_a_text_file_named_wav_is_refused_as_not_audio(work, capsys) -> None:
    (work / "talk.wav").write_text("meeting notes, not a recording\n")
    refused(work, capsys, _stream("talk.wav"), "--audio talk.wav", "not an audio file")


def test_an_empty_audio_file_is_refused(work, capsys) -> None:
    (work / "talk.wav").write_bytes(b"")
    refused(work, capsys, _stream("talk.wav"), "--audio talk.wav", "not an audio file")


def test_a_wav_cut_off_while_copying_is_refused(work, capsys) -> None:
    data = _wav(work / "full.wav", 6.0).read_bytes()
    (work / "talk.wav").write_bytes(data[: len(data) // 2])
    refused(work, capsys, _stream("talk.wav"), "--audio talk.wav", "is truncated")


def test_a_recording_shorter_than_the_minimum_is_refused(work, capsys) -> None:
    _wav(work / "talk.wav", 0.3)
    refused(work, capsys, _stream("talk.wav"), "--audio talk.wav", "0.30 s", "at least 1 s")


def test_more_minutes_than_the_audio_holds_are_refused(work, capsys) -> None:
    _wav(work / "talk.wav", 5.0)
    refused(work, capsys, _stream("talk.wav", "--minutes", "2"), "--minutes 2", "0.08 minutes")


def test_a_truncated_flac_is_refused_naming_it(tmp_path: Path) -> None:
    from as2d_cli.corpus.manifest import read_audio_file

    data = (0.1 * np.random.default_rng(0).standard_normal(16_000 * 5)).astype(np.float32)
    sf.write(str(tmp_path / "full.flac"), data, 16_000)
    blob = (tmp_path / "full.flac").read_bytes()
    (tmp_path / "cut.flac").write_bytes(blob[: len(blob) // 3])
    with pytest.raises(FormatError, match=r"cut\.flac .*(truncated|cannot be decoded)"):
        read_audio_file(tmp_path / "cut.flac", str(tmp_path / "cut.flac"))


def test_a_truncated_corpus_window_is_refused_without_reinstall_advice(tmp_path: Path) -> None:
    """A corpus copied to another folder, one window cut short: named, and the fix is to
    copy it again (reinstalling as2d repairs the bundled corpus only)."""
    from as2d_cli.corpus.manifest import DEFAULT_DIR, load_corpus

    bundled = load_corpus()
    w = bundled.get("test-read-000") if "test-read-000" in bundled.seconds() else bundled.windows[0]
    rel = w.audio.relative_to(DEFAULT_DIR)
    doc = json.loads((DEFAULT_DIR / "manifest.json").read_text())
    doc["windows"] = [x for x in doc["windows"] if x["id"] == w.id]
    doc["requests"] = []  # the QA requests name windows left out
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    samples = w.load_audio()[: 16_000 * 2]
    sf.write(str(tmp_path / rel), samples, 16_000, format="OGG", subtype="OPUS")
    with pytest.raises(FormatError) as e:
        load_corpus(tmp_path).get(w.id).load_audio()
    msg = str(e.value)
    assert str(tmp_path / rel) in msg and "truncated" in msg and "reinstall" not in msg


# ------------------------------------------------------------------ method options


def _decode(*extra: str) -> list[str]:
    return ["decode", "--window", "w", *extra]


# (case, arguments, what the line names)
METHOD_CASES = [
    (
        "replay-budget-for-sd",
        replay_args(PROFILE, "--method", "sd", "--budget", "5"),
        ["--budget", "method sd has none", "SD's width is --k"],
    ),
    (
        "replay-k-for-target-only",
        replay_args(PROFILE, "--method", "target-only", "--k", "5"),
        ["--k", "method target-only has none", "--method sd"],
    ),
    (
        "replay-source-for-asp",
        replay_args(PROFILE, "--method", "asp", "--source", "parakeet"),
        ["--source", "method asp has none", "as2d or as2d-no-bc"],
    ),
    (
        "replay-align-for-sd",
        replay_args(PROFILE, "--method", "sd", "--align", "paper"),
        ["--align", "method sd has none"],
    ),
    (
        "replay-miscased-method",
        replay_args(PROFILE, "--method", "as2D"),
        ["unknown --method 'as2D'", "did you mean as2d?"],
    ),
    (
        "decode-budget-for-sd",
        _decode("--method", "sd", "--budget", "3"),
        ["--budget", "method sd has none", "SD's width is --k"],
    ),
    (
        "decode-source-for-as2d-no-td",
        _decode("--method", "as2d-no-td", "--source", "ctc"),
        ["--source", "method as2d-no-td has none"],
    ),
    (
        "stream-source-for-target-only",
        ["stream", "--method", "target-only", "--source", "ctc", "--out", "r"],
        ["--source", "method target-only has none", "--method as2d"],
    ),
]


@pytest.mark.parametrize(
    "args,needles", [c[1:] for c in METHOD_CASES], ids=[c[0] for c in METHOD_CASES]
)
def test_an_option_the_method_has_not_is_refused(work, capsys, args, needles) -> None:
    refused(work, capsys, args, *needles)


def test_every_command_refuses_the_same_option_with_the_same_line(work, capsys) -> None:
    """One shared check: `--k` for target-only reads the same in replay and decode."""
    a = refused(work, capsys, replay_args(PROFILE, "--method", "target-only", "--k", "4"))
    b = refused(work, capsys, _decode("--method", "target-only", "--k", "4"))
    assert a == b


def test_the_shared_check_names_asps_own_threshold() -> None:
    from as2d_cli.engine.methods import check_method_options

    with pytest.raises(UserError, match=r"--threshold .*method asp has none \(ASP keeps"):
        check_method_options("asp", threshold=0.6)
    check_method_options("asp", budget=10)  # ASP's cap: accepted
    check_method_options("as2d", budget=7, threshold=0.6, batch=2, source="ctc", align="paper")


# ------------------------------------------------------------------ phone names


@pytest.mark.parametrize("typo", ["k7O", "k-70", "Redmi K70 Pro"])
def test_a_near_miss_phone_name_gets_did_you_mean(work, capsys, typo: str) -> None:
    refused(
        work,
        capsys,
        ["decode", "--window", "w", "--phone", typo],
        f"unknown --phone {typo!r}",
        "did you mean k70?",
    )


def test_an_uppercase_phone_name_is_the_phone_not_a_typo(work, capsys) -> None:
    line = refused(work, capsys, ["devices", "gate", "--phone", "K70"], "no adb server")
    assert "unknown" not in line and "did you mean" not in line


def test_a_near_miss_among_attached_phones_gets_did_you_mean(
    emulated_phone, capsys, monkeypatch, tmp_path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(emulated_phone.adb_port))
    refused(
        tmp_path,
        capsys,
        ["devices", "gate", "--phone", "mi-14"],
        "unknown --phone 'mi-14' (did you mean mi14?)",
        "attached:",
    )


# ------------------------------------------------------------------ model folders


def test_a_missing_models_folder_does_not_say_reinstall(work, capsys) -> None:
    line = refused(
        work, capsys, ["decode", "--window", "w", "--models", "pairs/turbo"], "no such folder"
    )
    assert "reinstall" not in line and "as2d models import" in line


def test_an_empty_models_folder_does_not_say_reinstall(work, capsys) -> None:
    (work / "pair").mkdir()
    line = refused(work, capsys, ["decode", "--window", "w", "--models", "pair"], "empty folder")
    assert "reinstall" not in line and "as2d models import" in line


def test_a_models_file_instead_of_a_folder_is_refused(work, capsys) -> None:
    (work / "pair.onnx").write_bytes(b"\0")
    refused(work, capsys, ["decode", "--window", "w", "--models", "pair.onnx"], "is a file")


def test_an_onnx_export_given_as_a_pair_says_import_it(work, capsys) -> None:
    (work / "export").mkdir()
    (work / "export" / "decoder_model.onnx").write_bytes(b"\0")
    (work / "export" / "config.json").write_text("{}")
    refused(
        work,
        capsys,
        ["decode", "--window", "w", "--models", "export"],
        "is a model export, not a pair",
        "as2d models import --target export",
    )


def test_a_user_pair_missing_a_file_says_reimport_not_reinstall(tmp_path: Path) -> None:
    from as2d_cli.models.model_pair import load_pair

    (tmp_path / "models.json").write_text(
        json.dumps(
            {
                "schema": "as2d.models",
                "version": 3,
                "tokenizer": "tokenizer.json",
                "specials": {"eot": 0},
                "models": {},
                "sha256": {"target_decoder.onnx": "0" * 64},
            }
        )
    )
    with pytest.raises(UserError) as e:
        load_pair(tmp_path)
    msg = str(e.value)
    assert "target_decoder.onnx is missing" in msg and "re-import" in msg
    assert "reinstall" not in msg


def test_a_user_pair_whose_manifest_is_damaged_says_reimport(tmp_path: Path) -> None:
    from as2d_cli.models.model_pair import load_pair

    (tmp_path / "models.json").write_text('{"schema": "as2d.models", "version": 3,')
    with pytest.raises(FormatError) as e:
        load_pair(tmp_path)
    assert "as2d models import" in str(e.value) and "training/export.py" not in str(e.value)
