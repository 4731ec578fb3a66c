"""Whisper-architecture pairs in the Hugging Face Optimum ONNX layout (tests/data/whisper,
made by training/whisper_fixtures.py): layouts, features, prompt, greedy output equal to
transformers' generation, exactness of every method, and import refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.errors import UserError
from as2d_cli.models.loader import open_seq2seq
from as2d_cli.models.model_pair import load_pair
from as2d_cli.models.pair import import_pair
from as2d_cli.models.prompting import PromptSpec
from as2d_cli.models.target import OrtTarget, greedy_decode
from as2d_cli.models.whisper import build_prompt, find_export
from as2d_cli.models.whisper_features import whisper_log_mel

DATA = Path(__file__).parent / "data" / "whisper"
TARGET, DRAFTER, CTC = DATA / "target", DATA / "drafter", DATA / "ctc"
REFERENCE = json.loads((DATA / "reference.json").read_text())
CORPUS = load_corpus()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_pair(TARGET, DRAFTER, tmp_path_factory.mktemp("pair") / "tiny", ctc=CTC)


def _copy(tmp_path: Path, src: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------------------- features
@pytest.mark.parametrize("key", sorted(np.load(DATA / "features.npz").files))
def test_features_equal_the_reference_extractor(key: str) -> None:
    """WhisperFeatureExtractor's output (recorded by transformers) against ours, in numpy."""
    ref = np.load(DATA / "features.npz")[key]  # the first 500 frames (5 s) of the window's 3000
    wid, bins = key.rsplit(".", 1)
    audio = CORPUS.get(wid).load_audio()
    ours = whisper_log_mel(audio, int(bins))
    assert ours.shape == (int(bins), 3000) and ref.shape == (int(bins), 500)
    assert np.abs(ours[:, :500] - ref).max() < 2e-4
    # past the audio (zero padding up to 30 s) every value is the floor: the maximum less 8, scaled
    tail = ours[:, len(audio) // 160 + 2 :]
    assert np.allclose(tail, ours.max() - 2.0, atol=1e-5)


def test_features_differ_with_the_audio() -> None:
    a = whisper_log_mel(CORPUS.get("dev-read-000").load_audio(), 80)
    b = whisper_log_mel(CORPUS.get("dev-meeting-001").load_audio(), 80)
    assert np.abs(a - b).max() > 0.5


# ---------------------------------------------------------------------------- layouts
def test_layouts_are_detected() -> None:
    t = find_export(TARGET)
    assert t.layout == "flat" and t.merged and t.encoder.name == "encoder_model.onnx"
    d = find_export(DRAFTER)
    assert (
        d.layout == "onnx"
        and not d.merged
        and d.with_past is not None
        and d.with_past.name == "decoder_with_past_model.onnx"
    )
    q = find_export(DRAFTER, "quantized")
    assert (
        q.encoder.name == "encoder_model_quantized.onnx"
        and q.decoder.name == "decoder_model_quantized.onnx"
    )


def test_a_missing_variant_names_the_ones_there() -> None:
    with pytest.raises(
        UserError, match=r"no encoder_model_q4\.onnx; its variants are: \(plain\), quantized"
    ):
        find_export(DRAFTER, "q4")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda d: (d / "config.json").unlink(),
            "is not a Hugging Face Whisper export: config.json",
        ),
        (
            lambda d: (
                (d / "onnx" / "decoder_model.onnx").unlink()
                or (d / "onnx" / "decoder_with_past_model.onnx").unlink()
                or (d / "onnx" / "decoder_model_quantized.onnx").unlink()
                or (d / "onnx" / "decoder_with_past_model_quantized.onnx").unlink()
            ),
            "has an encoder but no decoder",
        ),
        (
            lambda d: (d / "onnx" / "decoder_with_past_model.onnx").unlink(),
            "decoder_with_past_model.onnx is missing",
        ),
        (lambda d: (d / "tokenizer.json").unlink(), "has no tokenizer.json"),
        (
            lambda d: (d / "config.json").write_text(json.dumps({"model_type": "bert"})),
            "'bert' model, not Whisper",
        ),
    ],
)
def test_bad_folders_get_one_line(tmp_path: Path, edit, message: str) -> None:
    d = _copy(tmp_path, DRAFTER, "d")
    edit(d)
    with pytest.raises(UserError, match=message) as err:
        find_export(d)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------- prompt
def test_prompt_from_generation_config() -> None:
    gen = json.loads((TARGET / "generation_config.json").read_text())
    tok = json.loads((TARGET / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert build_prompt(gen, "transcribe", "de", "t") == (
        ids["<|startoftranscript|>"],
        ids["<|de|>"],
        ids["<|transcribe|>"],
        ids["<|notimestamps|>"],
    )
    assert build_prompt(gen, "translate", "en", "t")[2] == ids["<|translate|>"]
    with pytest.raises(UserError, match="no language 'ja'"):
        build_prompt(gen, "transcribe", "ja", "t")
    english_only = {k: v for k, v in gen.items() if k not in ("lang_to_id", "task_to_id")} | {
        "is_multilingual": False
    }
    assert build_prompt(english_only, "transcribe", None, "t") == (
        ids["<|startoftranscript|>"],
        ids["<|notimestamps|>"],
    )
    with pytest.raises(UserError, match="English-only model can only transcribe"):
        build_prompt(english_only, "translate", None, "t")


# ---------------------------------------------------------------------------- greedy = transformers
def _greedy(model, audio: np.ndarray, language: str, eos: int) -> list[int]:
    cross = model.encode(audio, language)
    logits, cache = model.decode(list(cross.prompt), model.empty_cache(), cross)
    out = [int(logits[-1].argmax())]
    while out[-1] != eos and len(cross.prompt) + len(out) < model.max_positions:
        logits, cache = model.decode([out[-1]], cache, cross)
        out.append(int(logits[-1].argmax()))
    return out


def _same_as_generate(ours: list[int], ref: list[int], eos: int, limit: int) -> bool:
    """transformers' Whisper generate returns the generated tokens without the prompt and
    without a final EOS: ours are those plus EOS, or exactly those when capped at the limit."""
    return ours == ref + [eos] or (ours == ref and len(ours) == limit)


def test_target_only_equals_transformers_greedy_generation(pair: Path) -> None:
    loaded = load_pair(pair)
    target = OrtTarget(loaded)
    for wid, by_model in REFERENCE["windows"].items():
        w = CORPUS.get(wid)
        ref = by_model["target"]["transcribe"]
        toks = greedy_decode(target, w.load_audio(), None, ref["language"])
        assert _same_as_generate(toks, ref["sequence"], target.eos_id, target.max_length), wid
        assert (
            target._cross.prompt[1]
            == json.loads((TARGET / "generation_config.json").read_text())["lang_to_id"][
                f"<|{w.language}|>"
            ]
        )


def test_drafter_and_translate_equal_transformers(pair: Path) -> None:
    loaded = load_pair(pair)
    drafter = open_seq2seq(loaded, "drafter")
    eos, limit = loaded.vocab.eot, drafter.max_positions - 4
    for wid, by_model in REFERENCE["windows"].items():
        ref = by_model["drafter"]["transcribe"]
        ours = _greedy(drafter, CORPUS.get(wid).load_audio(), ref["language"], eos)
        assert _same_as_generate(ours, ref["sequence"], eos, limit), wid
    wid = next(iter(REFERENCE["windows"]))
    ref = REFERENCE["windows"][wid]["target"]["translate"]
    translating = open_seq2seq(load_pair(pair, prompt=PromptSpec("translate")), "target")
    ours = _greedy(translating, CORPUS.get(wid).load_audio(), ref["language"], eos)
    assert _same_as_generate(ours, ref["sequence"], eos, limit)


def test_outputs_depend_on_the_audio() -> None:
    seqs = {tuple(v["target"]["transcribe"]["sequence"]) for v in REFERENCE["windows"].values()}
    assert len(seqs) == len(REFERENCE["windows"])


# ---------------------------------------------------------------------------- every method exact
def test_every_method_commits_the_targets_tokens(
    pair: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    models = load_models(str(pair))
    try:
        for wid in list(REFERENCE["windows"])[:2]:
            w = CORPUS.get(wid)
            audio = w.load_audio()
            ref = run_request(
                models,
                audio,
                decode_settings({"method": "target-only", "window": wid}),
                language=w.language,
            )
            assert ref["pair"] == "tiny" and ref["language"] == w.language
            for method, extra in [
                ("sd", {"k": 5}),
                ("asp", {}),
                ("as2d", {"budget": 3}),
                ("as2d", {"source": "ctc"}),
                ("as2d-no-td", {}),
                ("as2d-no-bc", {}),
            ]:
                res = run_request(
                    models,
                    audio,
                    decode_settings({"method": method, "window": wid, **extra}),
                    language=w.language,
                )
                assert res["tokens"] == ref["tokens"], (wid, method, extra)
                a = res["accounting_ns"]
                assert a["T"] == a["D"] + a["V"] - a["O"] + a["H"]
    finally:
        models.close()


def test_quantized_variant_imports_and_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    p = import_pair(TARGET, DRAFTER, tmp_path / "q", drafter_variant="quantized", copy=True)
    manifest = json.loads((p / "models.json").read_text())
    assert manifest["models"]["drafter"]["variant"] == "quantized"
    assert all(
        not Path(f).is_absolute() for f in manifest["models"]["drafter"]["sha256"]
    )  # copied in
    models = load_models(str(p))
    w = CORPUS.get("dev-read-000")
    audio = w.load_audio()
    ref = run_request(
        models, audio, decode_settings({"method": "target-only", "window": w.id}), language="en"
    )
    res = run_request(
        models, audio, decode_settings({"method": "as2d", "window": w.id}), language="en"
    )
    assert res["tokens"] == ref["tokens"]
    models.close()


def test_a_drafter_reading_the_targets_encoder_is_encoded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drafter that kept its teacher's encoder (here: the target itself as drafter) reads
    the target's encoder states: its source starts from them, stays exact, and publishes
    exactly the target's tokens."""
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    p = import_pair(TARGET, TARGET, tmp_path / "self", drafter_reads_target_encoder=True, copy=True)
    entry = json.loads((p / "models.json").read_text())["models"]["drafter"]
    assert (
        entry["encoder_from"] == "target"
        and entry["files"]["encoder"] == "target/encoder_model.onnx"
    )
    assert not (p / "drafter" / "encoder_model.onnx").exists()
    models = load_models(str(p))
    assert models.drafter_reads_target_encoder
    w = CORPUS.get("dev-read-000")
    audio = w.load_audio()
    ref = run_request(
        models, audio, decode_settings({"method": "target-only", "window": w.id}), language="en"
    )
    res = run_request(
        models, audio, decode_settings({"method": "as2d", "window": w.id}), language="en"
    )
    src = res["source_tokens"]  # what the source published before the target finished
    assert res["tokens"] == ref["tokens"] and src and src == ref["tokens"][: len(src)]
    # (how much of it the target accepts depends on the two threads' pace on this machine)
    assert models.shared_hidden() is models.target.hidden is not None  # handed over, not recomputed
    models.close()
    with pytest.raises(UserError, match="cannot read the target's encoder states"):
        import_pair(TARGET, DRAFTER, tmp_path / "no", drafter_reads_target_encoder=True)


# ---------------------------------------------------------------------------- import refusals
def _no_leftovers(parent: Path, name: str) -> None:
    assert not (parent / name).exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(f".{name}.importing")]


def test_a_drafter_with_another_tokenizer_drafts_through_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    d = _copy(tmp_path, DRAFTER, "d")
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[40:42]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped: another tokenizer
    (d / "tokenizer.json").write_text(json.dumps(tok))
    p = import_pair(TARGET, d, tmp_path / "out", ctc=CTC)
    entry = json.loads((p / "models.json").read_text())["models"]["drafter"]
    assert entry["conversion"] == "text" and entry["tokenizer"] == "drafter/tokenizer.json"
    assert json.loads((p / "models.json").read_text())["models"]["target"].get("conversion") is None
    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    models = load_models(str(p))
    try:
        w = CORPUS.get(next(iter(REFERENCE["windows"])))
        audio = w.load_audio()
        ref = run_request(
            models, audio, decode_settings({"method": "target-only", "window": w.id}), language="en"
        )
        accepted = 0
        for method in ("sd", "asp", "as2d", "as2d-no-td"):
            res = run_request(
                models, audio, decode_settings({"method": method, "window": w.id}), language="en"
            )
            assert res["tokens"] == ref["tokens"], method
            accepted += res["summary"]["accepted"]
        assert accepted > 0  # the converted drafts are the target's tokens, and some are right
    finally:
        models.close()


def test_import_refuses_a_drafter_whose_text_the_target_cannot_encode(tmp_path: Path) -> None:
    d = _copy(tmp_path, DRAFTER, "d")
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    vocab["▁漢字"] = max(vocab.values()) + 1  # a word the target's BPE has no letters for
    tok["added_tokens"] = [
        {**t, "id": t["id"] + 1} if t["id"] >= vocab["▁漢字"] else t for t in tok["added_tokens"]
    ]
    (d / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(
        UserError, match=r"cannot encode the text of 1 of the drafter's tokens"
    ) as err:
        import_pair(TARGET, d, tmp_path / "out")
    assert "\n" not in str(err.value)
    _no_leftovers(tmp_path, "out")


def test_import_refuses_a_vocabulary_beyond_the_tokenizer(tmp_path: Path) -> None:
    t, d = _copy(tmp_path, TARGET, "t"), _copy(tmp_path, DRAFTER, "d")
    for folder in (t, d):
        tok = json.loads((folder / "tokenizer.json").read_text())
        tok["added_tokens"] = tok["added_tokens"][:-1]  # <|notimestamps|>, the last id, is gone
        (folder / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(UserError, match="exceeds its tokenizer's"):
        import_pair(t, d, tmp_path / "out")
    _no_leftovers(tmp_path, "out")


def test_import_refuses_a_generation_config_without_an_eos_id(tmp_path: Path) -> None:
    t, d = _copy(tmp_path, TARGET, "t"), _copy(tmp_path, DRAFTER, "d")
    for folder in (t, d):  # both agree (no EOS at all), so only the missing id is wrong
        gen = json.loads((folder / "generation_config.json").read_text())
        del gen["eos_token_id"]
        (folder / "generation_config.json").write_text(json.dumps(gen))
    with pytest.raises(UserError, match="eos_token_id is None, not a token id") as err:
        import_pair(t, d, tmp_path / "out")
    assert "\n" not in str(err.value)
    _no_leftovers(tmp_path, "out")


def test_import_refuses_mel_bins_the_encoder_does_not_take(tmp_path: Path) -> None:
    t = _copy(tmp_path, TARGET, "t")
    cfg = json.loads((t / "config.json").read_text())
    assert cfg["num_mel_bins"] == 128
    cfg["num_mel_bins"] = 80
    (t / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"takes features of shape .*128.* says num_mel_bins 80"):
        import_pair(t, DRAFTER, tmp_path / "out")
    _no_leftovers(tmp_path, "out")


def test_import_never_overwrites_and_refuses_an_encoder_only_folder(
    tmp_path: Path, pair: Path
) -> None:
    with pytest.raises(UserError, match="never overwritten"):
        import_pair(TARGET, DRAFTER, pair)
    d = _copy(tmp_path, DRAFTER, "d")
    for f in (d / "onnx").glob("decoder*"):
        f.unlink()
    with pytest.raises(UserError, match="encoder-only export cannot decode"):
        import_pair(TARGET, d, tmp_path / "out")
    _no_leftovers(tmp_path, "out")


def test_the_pair_identity_covers_every_models_files(pair: Path) -> None:
    """Target and drafter both hold an encoder_model.onnx and a config.json: a change to
    either model's file changes the identity (none shadows the other's)."""
    import copy

    from as2d_cli.models.model_pair import ModelPair

    b = load_pair(pair, check_hashes=False)
    for role in ("target", "drafter"):
        m = copy.deepcopy(b.manifest)
        key = next(k for k in m["models"][role]["sha256"] if k.endswith("encoder_model.onnx"))
        m["models"][role]["sha256"][key] = "0" * 64
        assert ModelPair(b.directory, m, b.vocab).identity()["sha256"] != b.identity()["sha256"], (
            role
        )


def test_task_and_language_are_refused_for_the_bundled_pair() -> None:
    with pytest.raises(
        UserError, match="select a prompt; the pair in .* is the bundled transcription pair"
    ):
        load_pair(prompt=PromptSpec("translate"))


def test_external_data_files_are_carried_and_hashed(tmp_path: Path) -> None:
    """A large export keeps weights beside its ONNX file (model.onnx_data): the pair lists,
    hashes and copies it next to the file that loads it."""
    t = _copy(tmp_path, TARGET, "t")
    (t / "encoder_model.onnx_data").write_bytes(b"weights")
    p = import_pair(t, DRAFTER, tmp_path / "p", copy=True)
    entry = json.loads((p / "models.json").read_text())["models"]["target"]
    assert entry["external_data"] == ["target/encoder_model.onnx_data"]
    assert (
        "target/encoder_model.onnx_data" in entry["sha256"]
        and (p / "target" / "encoder_model.onnx_data").is_file()
    )


def test_a_changed_file_is_refused_at_load(tmp_path: Path) -> None:
    p = import_pair(TARGET, DRAFTER, tmp_path / "c", copy=True)
    f = p / "target" / "encoder_model.onnx"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(UserError, match="does not match its SHA-256.*re-import the pair"):
        load_pair(p)


# ---------------------------------------------------------------------------- models check
def test_models_check_passes_on_the_pair(pair: Path) -> None:
    from as2d_cli.models.check import check_pair, render_check

    res = check_pair(load_pair(pair), [CORPUS.get("dev-read-000")], reps=1)
    assert res["ok"], render_check(res)
    w = res["windows"][0]
    assert [x["width"] for x in w["target"]["widths"]] == list(range(1, 17))
    assert "pair OK" in render_check(res)


# ---------------------------------------------------------------------------- commands
def _as2d(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def test_decode_with_the_pair_prints_the_reference_tokens(pair: Path) -> None:
    ref = REFERENCE["windows"]["dev-read-000"]["target"]["transcribe"]["sequence"]
    eos = load_pair(pair).vocab.eot
    for method in ("target-only", "as2d", "sd"):
        r = _as2d(
            "decode",
            "--phone",
            "local",
            "--models",
            str(pair),
            "--window",
            "dev-read-000",
            "--method",
            method,
            "--json",
        )
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["tokens"] == ref + [eos] and res["pair"] == "tiny" and res["language"] == "en", (
            method
        )


def test_import_cli_refusal_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    r = _as2d(
        "models",
        "import",
        "--target",
        str(TARGET),
        "--drafter",
        str(DRAFTER),
        "--out",
        str(tmp_path / "p"),
        "--drafter-variant",
        "fp16",
    )
    assert (
        r.returncode == 2
        and r.stderr.count("\n") == 1
        and "variants are: (plain), quantized" in r.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_traces_record_the_pair_and_another_pairs_profile_is_refused(
    pair: Path, tmp_path: Path
) -> None:
    from as2d_cli.formats.trace_io import load_traces
    from as2d_cli.replay.report import load_inputs
    from as2d_cli.tracegen.build import build_traces

    out = build_traces(
        "dev", tmp_path / "dev.jsonl.gz", pair=load_pair(pair), limit=2, processes=1, max_tokens=16
    )
    ts = load_traces(out)
    prov = ts.provenance["pair"]
    assert prov["name"] == "tiny" and prov["task"] == "transcribe" and len(prov["sha256"]) == 64
    assert set(ts.sources) == {"drafter", "ctc"} and all(len(w.reference) <= 16 for w in ts.windows)
    # the same process then tracing the bundled pair gets the bundled pair, not the last one loaded
    bundled = load_traces(
        build_traces("dev", tmp_path / "b.jsonl.gz", limit=1, processes=1, max_tokens=8)
    )
    assert (
        bundled.provenance["pair"]["name"] == "bundled" and bundled.eos_id == load_pair().vocab.eot
    )
    shipped = (
        Path(__file__).resolve().parents[1]
        / "as2d_cli"
        / "assets"
        / "profiles"
        / "k70.profile.yaml"
    )
    with pytest.raises(
        UserError, match="built with pair 'tiny' but the profile was measured with the bundled pair"
    ):
        load_inputs(shipped, out)
    # a build interrupted with one pair does not resume with another
    partial = tmp_path / "val.jsonl.gz.partial.jsonl"
    partial.write_text(json.dumps({"pair": prov}) + "\n")
    with pytest.raises(UserError, match="holds windows traced with pair 'tiny'"):
        build_traces("val", tmp_path / "val.jsonl.gz", limit=1, processes=1, max_tokens=8)


def test_a_drafters_differences_are_information_a_targets_fail(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from as2d_cli.models.check import check_pair, pair_ok, render_check

    # an _int8 copy of the target as its drafter, as the ONNX community ships them
    d = _copy(tmp_path, TARGET, "t8")
    for stem in ("encoder_model", "decoder_model_merged"):
        quantize_dynamic(
            str(d / f"{stem}.onnx"), str(d / f"{stem}_int8.onnx"), weight_type=QuantType.QInt8
        )
    p = import_pair(TARGET, d, tmp_path / "p", drafter_variant="int8")
    res = check_pair(load_pair(p), [CORPUS.get("dev-read-000")], reps=1)
    assert res["ok"], render_check(res)
    # the rule itself: differences of the drafter are reported, the target's fail the check
    row = res["windows"][0]
    diff = {"width": 3, "positions": [2], "min_margin": 0.01}
    drafter_differs = {
        **row,
        "drafter": {**row["drafter"], "mismatches": [diff], "rollback_exact": False},
    }
    assert pair_ok([drafter_differs])
    text = render_check({**res, "windows": [drafter_differs], "ok": True})
    assert (
        "K-wide differs from sequential at K=3" in text
        and "information" in text
        and "pair OK" in text
    )
    target_differs = {**row, "target": {**row["target"], "mismatches": [diff]}}
    assert not pair_ok([target_differs])
