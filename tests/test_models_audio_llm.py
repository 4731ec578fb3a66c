"""Audio language models as model pairs (tests/data/audio_llm/, made by
training/audio_llm_fixtures.py): the ONNX-community layout, the chat-template prompt equal
to the Hugging Face processor's, greedy output equal to transformers' generation, every
method exact, the text conversion for a drafter with another tokenizer, and bad input."""

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

DATA = Path(__file__).parent / "data"
TARGET, DRAFTER = DATA / "audio_llm" / "target", DATA / "audio_llm" / "drafter"
WHISPER_DRAFTER, CTC = DATA / "whisper" / "drafter", DATA / "whisper" / "ctc"
REFERENCE = json.loads((DATA / "audio_llm" / "reference.json").read_text())
CASES = [c for c in REFERENCE["cases"] if c["model"] in ("target", "drafter")]
CORPUS = load_corpus()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_pair(TARGET, DRAFTER, tmp_path_factory.mktemp("alm") / "alm")


@pytest.fixture(scope="module")
def cross(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The audio-LLM target with a Whisper-layout drafter of another tokenizer, and CTC."""
    return import_pair(TARGET, WHISPER_DRAFTER, tmp_path_factory.mktemp("x") / "cross", ctc=CTC)


def _spec(case: dict) -> PromptSpec:
    if case["task"] == "answer":
        return PromptSpec("answer", question=case["instruction"])
    return PromptSpec(case["task"])


def _eos_set(model: str) -> set[int]:
    gen = json.loads(
        ((TARGET if model == "target" else DRAFTER) / "generation_config.json").read_text()
    )
    raw = gen["eos_token_id"]
    return set(raw if isinstance(raw, list) else [raw])


def _as_generated(tokens: list[int], model: str, primary: int) -> list[int]:
    """transformers' tokens with its end-of-text id written as the pair's EOS (the adapter
    folds every end-of-text id into the first)."""
    eos = _eos_set(model)
    return [primary if t in eos else t for t in tokens]


# ---------------------------------------------------------------------------- import
def test_import_records_the_kind_model_type_and_no_conversion(pair: Path) -> None:
    m = json.loads((pair / "models.json").read_text())
    t, d = m["models"]["target"], m["models"]["drafter"]
    assert t["kind"] == d["kind"] == "audio-llm-onnx"
    assert t["dims"]["model_type"] == "qwen2_audio" and d["conversion"] == "none"
    assert t["dims"]["kv_heads"] < t["dims"]["heads"]  # grouped-query attention
    assert t["dims"]["n_mels"] == 128 and d["dims"]["n_mels"] == 80
    assert "<|AUDIO|>" in t["chat_template"]


def test_a_quantized_drafter_variant_imports(tmp_path: Path) -> None:
    p = import_pair(TARGET, DRAFTER, tmp_path / "q", drafter_variant="quantized")
    d = json.loads((p / "models.json").read_text())["models"]["drafter"]
    assert d["variant"] == "quantized" and d["files"]["decoder"].endswith("_quantized.onnx")
    with pytest.raises(UserError, match="its variants are: .*quantized"):
        import_pair(TARGET, DRAFTER, tmp_path / "no", drafter_variant="int8")


# ---------------------------------------------------------------------------- prompt and output
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-{c['task']}-{c['window']}")
def test_prompt_and_greedy_output_equal_transformers(pair: Path, case: dict) -> None:
    from as2d_cli.models.target import OrtTarget, greedy_decode

    loaded = load_pair(pair, prompt=_spec(case))
    w = CORPUS.get(case["window"])
    target = OrtTarget(loaded, name=case["model"])
    assert target.model.rendered() == case["rendered"]
    ours = greedy_decode(target, w.load_audio(), len(case["tokens"]), w.language)
    assert list(target._cross.prompt) == case["prompt_ids"]
    assert ours == _as_generated(case["tokens"], case["model"], target.eos_id)


def test_a_voxtral_model_equals_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    vox = DATA / "audio_llm" / "voxtral"
    p = import_pair(vox, vox, tmp_path / "vox")  # the model drafting for itself
    assert (
        json.loads((p / "models.json").read_text())["models"]["target"]["dims"]["model_type"]
        == "voxtral"
    )
    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    models = load_models(str(p), prompt=PromptSpec("transcribe"))
    try:
        for case in (c for c in REFERENCE["cases"] if c["model"] == "voxtral"):
            w = CORPUS.get(case["window"])
            n = len(case["tokens"])
            for method in ("target-only", "as2d"):
                res = run_request(
                    models,
                    w.load_audio(),
                    decode_settings({"method": method, "window": w.id, "max_tokens": n}),
                    language=w.language,
                )
                assert res["tokens"] == case["tokens"], (case["window"], method)
            assert list(models.target._cross.prompt) == case["prompt_ids"]
    finally:
        models.close()


def test_outputs_depend_on_the_audio_and_the_task() -> None:
    by_window = {
        tuple(c["tokens"]) for c in CASES if c["model"] == "target" and c["task"] == "transcribe"
    }
    by_task = {
        tuple(c["tokens"])
        for c in CASES
        if c["model"] == "target" and c["window"] == CASES[0]["window"]
    }
    assert len(by_window) > 1 and len(by_task) > 1


def test_the_window_question_is_asked_without_question(pair: Path) -> None:
    loaded = load_pair(pair, prompt=PromptSpec("answer"))
    model = open_seq2seq(loaded, "target")
    w = CORPUS.get("dev-read-001")
    cross = model.encode(w.load_audio(), w.language, w.question)
    assert w.question in loaded.vocab.decode(list(cross.prompt))
    assert loaded.prompt_hash(w.question) != loaded.prompt_hash(CORPUS.get("dev-read-002").question)


# ---------------------------------------------------------------------------- every method exact
METHODS = [
    ("sd", {"k": 5}),
    ("asp", {}),
    ("as2d", {"budget": 3}),
    ("as2d-no-td", {}),
    ("as2d-no-bc", {}),
]


def _all_methods_exact(folder: Path, prompt: PromptSpec, extra: list, monkeypatch) -> None:
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    models = load_models(str(folder), prompt=prompt)
    try:
        for wid in ("dev-read-000", "dev-meeting-001"):
            w = CORPUS.get(wid)
            audio = w.load_audio()
            kw = {"language": w.language, "question": w.question}
            ref = run_request(
                models,
                audio,
                decode_settings({"method": "target-only", "window": wid, "max_tokens": 24}),
                **kw,
            )
            assert ref["model_type"] == "qwen2_audio"
            for method, opts in METHODS + extra:
                res = run_request(
                    models,
                    audio,
                    decode_settings({"method": method, "window": wid, "max_tokens": 24, **opts}),
                    **kw,
                )
                assert res["tokens"] == ref["tokens"], (wid, method, opts)
                a = res["accounting_ns"]
                assert a["T"] == a["D"] + a["V"] - a["O"] + a["H"]
    finally:
        models.close()


def test_every_method_commits_the_targets_tokens(
    pair: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _all_methods_exact(pair, PromptSpec("transcribe"), [], monkeypatch)
    _all_methods_exact(pair, PromptSpec("answer"), [], monkeypatch)


def test_a_drafter_of_another_vocabulary_and_ctc_stay_exact(
    cross: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = json.loads((cross / "models.json").read_text())["models"]
    assert m["drafter"]["kind"] == "whisper-onnx" and m["drafter"]["conversion"] == "text"
    _all_methods_exact(cross, PromptSpec("transcribe"), [("as2d", {"source": "ctc"})], monkeypatch)


def test_a_drafter_with_the_targets_audio_encoder_reads_its_embeddings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--drafter-reads-target-encoder on audio LLMs: the drafter's audio encoder must be the
    target's file; the request is then encoded once, by the target, and the drafter builds
    its prompt around the target's audio embeddings — publishing what its own encoding would."""
    from native.protocol import decode_settings
    from native.request import load_models, run_request

    monkeypatch.setenv("AS2D_PRODUCER", "thread")
    p = import_pair(TARGET, TARGET, tmp_path / "self", drafter_reads_target_encoder=True, copy=True)
    entry = json.loads((p / "models.json").read_text())["models"]["drafter"]
    assert entry["encoder_from"] == "target"
    assert entry["files"]["encoder"] == "target/audio_encoder.onnx"
    assert not (p / "drafter" / "audio_encoder.onnx").exists()
    models = load_models(str(p), prompt=PromptSpec("transcribe"))
    try:
        assert models.drafter_reads_target_encoder
        w = CORPUS.get("dev-read-000")
        audio = w.load_audio()
        settings = {"window": w.id, "max_tokens": 24}
        ref = run_request(models, audio, decode_settings({"method": "target-only", **settings}))
        res = run_request(
            models, audio, decode_settings({"method": "as2d", "batch": 1, **settings})
        )
        assert res["tokens"] == ref["tokens"]
        src = res["source_tokens"]  # the drafter is the target: it publishes the same tokens
        assert src and src == ref["tokens"][: len(src)]
        assert models.shared_hidden() is models.target.hidden is not None
        own = models.drafter.model.encode(audio)
        given = models.drafter.model.encode_request(audio, models.target.hidden)
        assert given.prompt == own.prompt and np.array_equal(given.hidden, own.hidden)
    finally:
        models.close()
    with pytest.raises(UserError, match="not the target's .* cannot read the target's encoder"):
        import_pair(TARGET, DRAFTER, tmp_path / "no", drafter_reads_target_encoder=True)
    assert not (tmp_path / "no").exists()


def test_the_conversion_publishes_only_what_cannot_change() -> None:
    from as2d_cli.models.conversion import TextConversion
    from as2d_cli.models.model_pair import Vocabulary

    tgt = load_pair(
        import_pair(TARGET, DRAFTER, Path(pytest.importorskip("tempfile").mkdtemp()) / "v")
    )
    src = Vocabulary(WHISPER_DRAFTER / "tokenizer.json", {"eot": 0, "sot": 1})
    conv = TextConversion(src, tgt.vocab)
    text = "the cat sat on the mat"
    ids = src.encode(text, start=True)
    out: list[int] = []
    for t in ids:  # one source token at a time
        got = [tok for tok, _ in conv.feed([(t, 0.9)])]
        out += got
        # what is published is a prefix of the whole text's encoding, at every step
        assert out == tgt.vocab.encode(text, start=True)[: len(out)]
    assert tgt.vocab.decode(out) == "the cat sat on the"  # the last word waits for its end
    out += [tok for tok, _ in conv.feed([(0, None)])]  # the source's EOS
    assert out == [*tgt.vocab.encode(text, start=True), tgt.vocab.eot]


# ---------------------------------------------------------------------------- bad input
def _copy(tmp_path: Path, src: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _with_template(tmp_path: Path, placeholder: str) -> Path:
    """The target export with its chat template's audio placeholder replaced."""
    t = _copy(tmp_path, TARGET, "t")
    cfg = json.loads((t / "tokenizer_config.json").read_text())
    cfg["chat_template"] = cfg["chat_template"].replace("<|AUDIO|>", placeholder)
    (t / "tokenizer_config.json").write_text(json.dumps(cfg))
    (t / "chat_template.jinja").unlink(missing_ok=True)
    return t


def test_a_template_without_the_audio_placeholder_is_refused(tmp_path: Path) -> None:
    t = _with_template(tmp_path, "")
    with pytest.raises(
        UserError, match="tokenizer_config.json: the chat template renders no audio"
    ) as err:
        import_pair(t, DRAFTER, tmp_path / "p")
    assert "\n" not in str(err.value)


def test_a_placeholder_count_unlike_the_encoders_is_refused(tmp_path: Path) -> None:
    t = _with_template(tmp_path, "<|AUDIO|>" * 3)
    model = open_seq2seq(load_pair(import_pair(t, DRAFTER, tmp_path / "p")), "target")
    with pytest.raises(UserError, match="holds 3 audio placeholders but the audio encoder gives"):
        model.encode(CORPUS.get("dev-read-000").load_audio())


def test_a_graph_lacking_an_input_is_refused_and_nothing_stays(tmp_path: Path) -> None:
    t = _copy(tmp_path, TARGET, "t")
    shutil.copy(t / "onnx" / "embed_tokens.onnx", t / "onnx" / "decoder_model_merged.onnx")
    with pytest.raises(UserError, match="lacks the inputs") as err:
        import_pair(t, DRAFTER, tmp_path / "p")
    assert "\n" not in str(err.value)
    assert not [x for x in tmp_path.iterdir() if x.name.startswith((".p.importing", "p"))]


def test_a_prompt_longer_than_the_context_is_refused(pair: Path) -> None:
    loaded = load_pair(pair, prompt=PromptSpec("transcribe", text="word " * 800))
    model = open_seq2seq(loaded, "target")
    with pytest.raises(UserError, match="the prompt is .* tokens, the model holds 1024 positions"):
        model.encode(CORPUS.get("dev-read-000").load_audio())


def test_prompt_settings_are_refused_where_they_do_not_apply() -> None:
    with pytest.raises(
        UserError, match="--question asks a spoken question: use it with --task answer"
    ):
        PromptSpec("transcribe", question="who?")
    whisper = import_pair(
        DATA / "whisper" / "target",
        WHISPER_DRAFTER,
        Path(pytest.importorskip("tempfile").mkdtemp()) / "w",
    )
    with pytest.raises(UserError, match="--task answer needs an audio language model"):
        load_pair(whisper, prompt=PromptSpec("answer", question="who?"))


def _as2d(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_decode_prints_the_reference_tokens(pair: Path) -> None:
    primary = json.loads((TARGET / "generation_config.json").read_text())["eos_token_id"][0]
    for task in ("transcribe", "answer"):
        case = next(c for c in CASES if c["model"] == "target" and c["task"] == task)
        extra = ["--question", case["instruction"]] if task == "answer" else []
        for method in ("target-only", "sd", "as2d"):
            res = _as2d(
                "decode",
                "--phone",
                "local",
                "--models",
                str(pair),
                "--window",
                case["window"],
                "--task",
                task,
                *extra,
                "--method",
                method,
                "--max-tokens",
                str(len(case["tokens"])),
                "--json",
            )
            assert res.returncode == 0, res.stderr
            got = json.loads(res.stdout)
            assert got["tokens"] == _as_generated(case["tokens"], "target", primary), (task, method)
            assert got["task"] == task and got["model_type"] == "qwen2_audio"


def test_question_without_answer_is_one_line() -> None:
    for args, says in (
        (["--task", "transcribe", "--question", "who?"], "--question asks a spoken question"),
        (["--question", "who?"], "is the bundled transcription pair"),
        (["--task", "answer"], "is the bundled transcription pair"),
    ):
        res = _as2d("decode", "--window", "dev-read-000", *args, "--json")
        assert res.returncode == 2 and says in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and res.stderr.strip().count("\n") == 0


# ---------------------------------------------------------------------------- every command
def test_traces_selection_native_eval_and_stream_run_on_the_pair(tmp_path: Path) -> None:
    import yaml

    from as2d_cli.formats.trace_io import load_traces

    p = import_pair(TARGET, DRAFTER, tmp_path / "alm")
    for split in ("dev", "val", "test"):
        r = _as2d(
            "traces",
            "build",
            "--models",
            str(p),
            "--task",
            "answer",
            "--split",
            split,
            "--limit",
            "2",
            "--max-tokens",
            "10",
            "--processes",
            "1",
        )
        assert r.returncode == 0, r.stderr
    folder = p / "traces" / "answer"  # another task than the pair's default: its own folder
    ts = load_traces(folder / "dev.jsonl.gz")
    prov = ts.provenance["pair"]
    assert prov["task"] == "answer" and prov["model_type"] == "qwen2_audio"
    assert all(w.task == "qa" for w in ts.windows) and not (p / "traces" / "dev.jsonl.gz").exists()
    # a profile recorded as measured with this pair and task (the K70 profile's costs)
    k70 = Path(__file__).parents[1] / "as2d_cli" / "assets" / "profiles" / "k70.profile.yaml"
    doc = yaml.safe_load(k70.read_text())
    doc["device"]["pair"] = load_pair(p, prompt=PromptSpec("answer")).identity()
    prof = tmp_path / "alm.profile.yaml"
    prof.write_text(yaml.safe_dump(doc))
    dep = tmp_path / "alm.deployment.yaml"
    r = _as2d(
        "select-budget",
        "--profile",
        str(prof),
        "--traces",
        str(folder / "dev.jsonl.gz"),
        "--traces",
        str(folder / "val.jsonl.gz"),
        "--sources",
        "drafter",
        "--budgets",
        "1-4",
        "--out",
        str(dep),
        "--processes",
        "1",
    )
    assert r.returncode == 0, r.stderr
    r = _as2d(
        "eval",
        "--phone",
        "local",
        "--models",
        str(p),
        "--task",
        "answer",
        "--profile",
        str(prof),
        "--deployment",
        str(dep),
        "--allow-unconfirmed",
        "--native",
        "--windows",
        "1",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--rest",
        "0",
        "--interval",
        "0",
        "--settle",
        "0",
        "--results",
        str(tmp_path / "res"),
        "--json",
    )
    assert r.returncode == 0, r.stderr
    runs = [
        json.loads(x)
        for x in next((tmp_path / "res").rglob("native.runs.jsonl")).read_text().splitlines()
    ]
    by = {}
    for run in runs:
        by.setdefault(run["window"], {})[run["method"]] = run["res"]["tokens"]
    assert by and all(len(m) == 4 for m in by.values())  # target-only, SD, ASP, As²d
    for window, methods in by.items():
        assert len({tuple(t) for t in methods.values()}) == 1, window  # every method exact
    r = _as2d(
        "stream",
        "--phone",
        "local",
        "--models",
        str(p),
        "--task",
        "answer",
        "--question",
        "What was said?",
        "--minutes",
        "0.2",
        "--rest",
        "0",
        "--interval",
        "0",
        "--out",
        str(tmp_path / "stream"),
        "--check",
    )
    assert r.returncode == 0, r.stderr
    blocks = next((tmp_path / "stream").rglob("blocks.csv")).read_text().splitlines()
    assert len(blocks) > 1


def test_unpadded_features_equal_the_reference_extractor() -> None:
    """An ultravox model's features: WhisperFeatureExtractor with padding="longest" (the
    audio's own frames), recorded by transformers, against ours."""
    import numpy as np

    from as2d_cli.models.whisper_features import whisper_log_mel

    ref = np.load(DATA / "audio_llm" / "features_unpadded.npz")
    ours = whisper_log_mel(ref["audio"], 80, to_window=False)
    assert ours.shape == ref["features"].shape == (80, len(ref["audio"]) // 160)
    assert np.abs(ours - ref["features"]).max() < 2e-4
