"""The bundled ONNX models through the ONNX Runtime backend: loading checks, exact batched
verification against sequential decoding, rollback, prefix-conditioned drafting, sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.engine.interfaces import Source
from as2d_cli.errors import FormatError, UserError
from as2d_cli.models.drafter import OrtDrafter
from as2d_cli.models.model_pair import DEFAULT_DIR, load_pair
from as2d_cli.models.ortio import as_array
from as2d_cli.models.session import Seq2SeqModel
from as2d_cli.models.sources import CtcRecognizer, CtcSource, DrafterSource, LookaheadSource
from as2d_cli.models.target import OrtTarget, greedy_decode

BUNDLE = load_pair()
DEV = load_corpus().split("dev")
READ = [w for w in DEV if w.setting == "read"]
WINDOW = min(READ, key=lambda w: w.seconds)
AUDIO = WINDOW.load_audio()


@pytest.fixture(scope="module")
def target() -> OrtTarget:
    return OrtTarget(BUNDLE)


@pytest.fixture(scope="module")
def reference(target: OrtTarget) -> list[int]:
    return greedy_decode(target, AUDIO)


def test_sessions_are_pinned_to_one_thread(target: OrtTarget) -> None:
    for sess in (target.model.encoder, target.model.decoder):
        assert sess.get_session_options().intra_op_num_threads == 1


def test_target_listens(target: OrtTarget, reference: list[int]) -> None:
    """The target's output depends on the audio (not a constant language-model sentence),
    and stays within the cache capacity. Quality (WER) is measured by
    benchmarks/model_quality.py, not asserted here."""
    other = max(READ, key=lambda w: w.seconds)
    assert greedy_decode(target, other.load_audio())[:10] != reference[:10]
    assert 1 <= len(reference) <= target.max_length
    assert reference[-1] == BUNDLE.vocab.eot or len(reference) == target.max_length
    assert BUNDLE.vocab.decode(reference).strip()


@pytest.mark.parametrize("width", [2, 8, 16])
def test_batched_verification_equals_sequential(
    target: OrtTarget, reference: list[int], width: int
) -> None:
    """Root + (width-1) correct candidates per call: every decision equals the reference."""
    assert target.start(AUDIO) == reference[0]
    pos = 0
    while pos < len(reference) - 1:
        chunk = reference[pos : pos + width]
        decisions = target.verify(chunk)
        m = min(len(chunk), len(reference) - pos - 1)  # no reference decision after EOS
        assert len(decisions) == len(chunk)
        assert decisions[:m] == reference[pos + 1 : pos + 1 + m], f"diverged in the call at {pos}"
        pos += len(chunk)
    assert target.length == pos


def test_rejected_candidates_roll_back_exactly(target: OrtTarget, reference: list[int]) -> None:
    """Wrong candidates after the root: commit the root's decision, roll back, carry on."""
    eot = BUNDLE.vocab.eot
    out = [target.start(AUDIO)]
    rng = np.random.default_rng(0)
    while out[-1] != eot and len(out) < len(reference):
        room = min(5, target.max_length - target.length - 1)
        wrong = [int(t) for t in rng.integers(4, BUNDLE.vocab.size, room)]
        committed = target.length
        decisions = target.verify([out[-1]] + wrong)
        target.rollback(committed + 1)  # keep only the root
        out.append(decisions[0])
    assert out == reference


def test_drafter_follows_prefix_with_cache_reuse(reference: list[int]) -> None:
    fresh, reused = OrtDrafter(BUNDLE), OrtDrafter(BUNDLE)
    fresh.start(AUDIO)
    reused.start(AUDIO)
    reused.draft(reference[:3], 6)  # leaves its own tokens in the cache
    # An 8-bit decoder (models.json ``quantized``) rounds each call's activations to int8 by
    # blocks, and ONNX Runtime's kernels for one row and for several round differently: a
    # cache built by one catch-up call and one built token by token then differ by about
    # that rounding (~2e-3 in a confidence), a float32 decoder's by float noise only.
    # Nothing after a draft's first EOS is ever used (the output ends there; the free-running
    # source stops), and over the EOS run that follows the rounding compounds (1.5e-2 seen):
    # confidences are compared up to that EOS.
    atol = 1e-2 if "quantized" in BUNDLE.model("drafter") else 1e-5
    eot = BUNDLE.vocab.eot
    for n in (1, 4, 2, min(len(reference) - 1, 30)):
        a = fresh.draft(reference[:n], 6)
        fresh.start(AUDIO)
        b = reused.draft(reference[:n], 6)
        used = a.tokens.index(eot) + 1 if eot in a.tokens else len(a.tokens)
        assert a.tokens == b.tokens
        assert np.allclose(a.confidences[:used], b.confidences[:used], atol=atol)
        assert len(a.tokens) == 6 and all(0.0 < c <= 1.0 for c in a.confidences)
        assert (
            fresh.draft(reference[:n], 6) == a
        )  # the same calls again: the same draft, to the bit
        fresh.start(AUDIO)


def test_drafter_stop_below_includes_the_low_token() -> None:
    d = OrtDrafter(BUNDLE)
    d.start(AUDIO)
    free = d.draft([BUNDLE.vocab.sot + 10], 12)
    stopped = d.draft([BUNDLE.vocab.sot + 10], 12, stop_below=1.01)
    assert stopped.tokens == free.tokens[:1]


def _drain(src: Source) -> list[list[tuple[int, float | None]]]:
    src.start()
    steps = []
    while (step := src.step()) is not None:
        steps.append(list(step))
    return steps


def test_drafter_source_is_the_drafters_own_history() -> None:
    src = DrafterSource(Seq2SeqModel(BUNDLE, "drafter"), AUDIO)
    assert isinstance(src, Source) and src.kind == "autoregressive"
    steps = _drain(src)
    tokens = [s[0][0] for s in steps]
    assert all(len(s) == 1 and 0.0 < s[0][1] <= 1.0 for s in steps)
    assert tokens[-1] == BUNDLE.vocab.eot or len(tokens) == src.limit
    d = OrtDrafter(BUNDLE)
    d.start(AUDIO)
    cont = d.draft(tokens[:1], len(tokens) - 1)
    assert list(cont.tokens) == tokens[1:]


def test_lookahead_source_emits_the_drafters_own_sequence_in_fewer_steps() -> None:
    """Checking its look-ahead guesses, the source emits what the drafter source emits —
    tokens and confidences — one or two tokens per forward, on the shortest window of every
    setting (on some longer windows the rounding of two-token calls tips a near-tie); the shipped head's guesses are kept often enough that it needs far fewer
    forwards. A cap it reaches mid-step stops it at exactly the cap."""
    plain_model = Seq2SeqModel(BUNDLE, "drafter")
    ahead_model = Seq2SeqModel(BUNDLE, "drafter", ahead=True)
    n_plain = n_ahead = 0
    for setting in sorted({w.setting for w in DEV}):
        audio = min((w for w in DEV if w.setting == setting), key=lambda w: w.seconds).load_audio()
        plain = _drain(DrafterSource(plain_model, audio))
        ahead = _drain(LookaheadSource(ahead_model, audio))
        assert [t for s in ahead for t, _ in s] == [s[0][0] for s in plain]
        # The 8-bit decoder rounds a two-token call a little differently from a one-token one
        # (about 4e-6 per call, carried through the cache): confidences agree to ~0.02.
        assert np.allclose([c for s in ahead for _, c in s], [s[0][1] for s in plain], atol=0.03)
        assert all(len(s) in (1, 2) for s in ahead) and len(ahead[0]) == 1
        n_plain, n_ahead = n_plain + len(plain), n_ahead + len(ahead)
    assert n_ahead < 0.8 * n_plain
    for cap in (1, 2, 5, 6):
        capped = _drain(LookaheadSource(ahead_model, AUDIO, limit=cap))
        assert sum(len(s) for s in capped) == cap


def test_the_lookahead_decoder_is_the_drafters_decoder_plus_the_head() -> None:
    """Same weights: the look-ahead file's logits and caches are the plain file's."""
    plain, ahead = Seq2SeqModel(BUNDLE, "drafter"), Seq2SeqModel(BUNDLE, "drafter", ahead=True)
    cross = plain.encode(AUDIO)
    toks = [BUNDLE.vocab.sot, 40, 41, 42]
    a_logits, a_cache = plain.decode(toks, plain.empty_cache(), cross)
    b_logits, b_next, b_cache = ahead.decode_ahead(toks, ahead.empty_cache(), cross)
    assert b_next is not None and b_next.shape == b_logits.shape
    assert np.allclose(a_logits, b_logits, atol=1e-5)
    assert all(
        np.allclose(as_array(x), as_array(y), atol=1e-5) for x, y in zip(a_cache[0], b_cache[0])
    )
    assert plain.decode_ahead(toks, plain.empty_cache(), cross)[1] is None


def test_drafter_source_reads_the_targets_encoder_states(target: OrtTarget) -> None:
    """The shipped drafter has no encoder of its own: handed the target's encoder states for
    the request (computed in the target's prefill) it starts with only its cross-attention
    projection, and decodes exactly what it decodes when it encodes the audio itself."""
    model = Seq2SeqModel(BUNDLE, "drafter")
    assert model.encoder_from == "target" and model.shares_encoder_of(target.model)
    assert "encoder" not in BUNDLE.model("drafter")["files"]
    target.start(AUDIO)
    assert target.hidden is not None and target.hidden.shape[2] == int(model.dims["enc_d"])
    own, shared = DrafterSource(model, AUDIO), DrafterSource(model, AUDIO, hidden=target.hidden)
    shared.start()  # the projection alone
    own.start()
    assert np.array_equal(own._cross.k, shared._cross.k) and np.array_equal(
        own._cross.v, shared._cross.v
    )
    assert [s[0][0] for s in _drain(own)] == [s[0][0] for s in _drain(shared)]
    d = OrtDrafter(BUNDLE)
    d.start(AUDIO, target.hidden)
    assert list(d.draft([], 5).tokens) == [s[0][0] for s in _drain(DrafterSource(model, AUDIO))][:5]


def test_shared_encoder_of_another_width_is_refused(tmp_path: Path) -> None:
    d = _edited_bundle(tmp_path, lambda m: m["models"]["drafter"]["dims"].update(enc_d=128))
    with pytest.raises(
        UserError, match="reads 'target'.s encoder states of width 256, but was built for 128"
    ):
        Seq2SeqModel(load_pair(d), "drafter")


def test_ctc_source_chunks() -> None:
    rec = CtcRecognizer(BUNDLE)
    src = CtcSource(rec, AUDIO)
    assert isinstance(src, Source) and src.kind == "chunked"
    steps = _drain(src)
    assert len(steps) == int(np.ceil(len(AUDIO) / (2.56 * 16000)))
    assert all(c is None for s in steps for _, c in s)
    assert steps[-1][-1][0] == BUNDLE.vocab.eot
    assert rec.eligible("en") and not rec.eligible("de")
    for s, text in zip(steps, src.texts):
        toks = [t for t, _ in s if t != BUNDLE.vocab.eot]
        assert toks == BUNDLE.vocab.encode(text)
    assert any(src.texts)  # it publishes text; its accuracy is in benchmarks/model_quality.py


def _copy_bundle(tmp_path: Path) -> Path:
    dst = tmp_path / "models"
    shutil.copytree(DEFAULT_DIR, dst)
    return dst


def _edited_bundle(tmp_path: Path, edit) -> Path:
    """A copy of the bundled pair whose models.json went through ``edit`` (the files unchanged)."""
    d = _copy_bundle(tmp_path)
    m = json.loads((d / "models.json").read_text())
    edit(m)
    (d / "models.json").write_text(json.dumps(m))
    return d


def test_missing_file_is_named(tmp_path: Path) -> None:
    d = _copy_bundle(tmp_path)
    (d / "drafter_decoder.onnx").unlink()
    with pytest.raises(UserError, match="drafter_decoder.onnx is missing"):
        load_pair(d)


def test_changed_file_is_named(tmp_path: Path) -> None:
    d = _copy_bundle(tmp_path)
    with open(d / "ctc.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(UserError, match="ctc.onnx does not match its SHA-256"):
        load_pair(d)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(version=99), "upgrade as2d"),
        (lambda m: m.update(schema="x"), "schema"),
        (lambda m: m["models"]["target"].pop("files"), "models.target has no 'files'"),
    ],
)
def test_bad_manifest_is_refused(tmp_path: Path, edit, message: str) -> None:
    d = _edited_bundle(tmp_path, edit)
    with pytest.raises(FormatError, match=message):
        load_pair(d)


def test_mismatched_vocabulary_is_refused(tmp_path: Path) -> None:
    d = _edited_bundle(tmp_path, lambda m: m["models"]["drafter"]["dims"].update(vocab=999))
    with pytest.raises(UserError, match="pair is mixed"):
        OrtDrafter(load_pair(d))


def test_quantized_decoders_are_as_the_manifest_says() -> None:
    """models.json's ``quantized`` entry describes the decoder file the runtime loads (every
    weight MatMul rewritten as 8-bit MatMulNBits); the target, whose greedy output is the
    reference, has no weight MatMul rewritten."""
    onnx = pytest.importorskip("onnx")
    models = BUNDLE.manifest["models"]
    assert "quantized" in models["drafter"] and "quantized" not in models["target"]
    for name, info in models.items():
        if info["kind"] != "seq2seq":
            continue
        graph = onnx.load(str(BUNDLE.path(info["files"]["decoder"]))).graph
        consts = {i.name for i in graph.initializer}
        nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
        weight_matmuls = [n for n in graph.node if n.op_type == "MatMul" and set(n.input) & consts]
        q = info.get("quantized")
        if q is None:
            assert not nbits, name
            continue
        assert len(nbits) == q["matmuls"] > 0 and not weight_matmuls, name
        for n in nbits:
            attr = {a.name: a.i for a in n.attribute}
            assert (attr["bits"], attr["block_size"], attr["accuracy_level"]) == (
                q["bits"],
                q["block_size"],
                q["accuracy_level"],
            ), n.name
            assert (len(n.input) > 3 and n.input[3] != "") != q["symmetric"], (
                n.name
            )  # zero points: asymmetric only


def test_distillation_transcripts_are_the_targets_greedy_output(reference: list[int]) -> None:
    """training/distill.py decodes from precomputed training features; on the same
    features it must give target-only's tokens (those are what the drafter and the CTC
    source are trained to propose), EOS dropped; a generation limit it reaches gives None."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    from distill import greedy_from_mel

    from as2d_cli.models.features import log_mel

    model = Seq2SeqModel(BUNDLE, "target")
    mel = log_mel(AUDIO)
    assert reference[-1] == BUNDLE.vocab.eot
    assert greedy_from_mel(model, mel, 255) == reference[:-1]
    assert greedy_from_mel(model, mel, len(reference) - 2) is None


def test_training_composites_join_same_setting_utterances_end_to_end(
    tmp_path: Path, monkeypatch
) -> None:
    """train.py --concat: long training items are short utterances of one language and
    setting joined end to end — the features piece by piece, the labels (and auxiliary
    targets) concatenated — each used once more, at most 20 s, the originals kept."""
    import json
    import sys

    import numpy as np

    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    import train

    rng = np.random.default_rng(0)
    words = "the quick brown fox jumps over a lazy dog".split()
    items, feats, off = [], [], 0
    for i in range(60):
        frames = int(rng.integers(100, 900))
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 8))))
        items.append(
            {
                "id": f"u{i}",
                "setting": ["read", "sung"][i % 2],
                "language": ["en", "de"][i % 3 == 0],
                "text": text,
                "offset": off,
                "frames": frames,
            }
        )
        feats.append(
            np.full((frames, 80), i, dtype=np.float32)
        )  # each utterance's frames hold its number
        off += frames
    shard = tmp_path / "train_shards" / "1"
    shard.mkdir(parents=True)
    np.save(shard / "features.npy", np.concatenate(feats))
    (shard / "index.json").write_text(json.dumps({"items": items}))
    monkeypatch.setattr(train, "WORK", tmp_path)

    data = train.Data("target", train.DataOptions(concat=1.0))
    tok = train.load_tokenizer()
    made = [k for k, it in enumerate(data.items) if "+" in it["id"]]
    assert len(data.items) == 60 + len(made) and data.composites == len(made) > 0
    used = [p for k in made for p in data.items[k]["id"].split("+")]
    assert len(used) == len(set(used))  # each short utterance in at most one composite
    by_id = {it["id"]: it for it in items}
    for k in made:
        it = data.items[k]
        parts = [by_id[p] for p in it["id"].split("+")]
        assert len(parts) >= 2 and it["frames"] == sum(p["frames"] for p in parts) <= 2000
        assert {(p["setting"], p["language"]) for p in parts} == {(it["setting"], it["language"])}
        assert data.labels[k] == [t for p in parts for t in tok.encode(p["text"]).ids]
        assert data.labels[k] == tok.encode(it["text"]).ids  # joining texts = joining token ids
    k = made[0]
    b = next(b for b, ids in enumerate(data.batches) if k in ids)
    mel = data.batch(b, "target")[0][data.batches[b].index(k)]
    at = 0
    for p in data.items[k]["id"].split("+"):
        n = by_id[p]["frames"]
        assert (mel[at : at + n] == int(p[1:])).all()
        at += n

    # --fresh-concat: every epoch its own grouping of the same utterances; an epoch's batches
    # are the same whenever it is built (a resumed run), and the single utterances stay.
    fresh = train.Data("target", train.DataOptions(concat=1.0, fresh_concat=True))

    def groups(d: train.Data, epoch: int) -> tuple[set[str], list[list[str]]]:
        d.epoch_order(epoch)
        return (
            {it["id"] for it in d.items if "+" in it["id"]},
            [sorted(d.items[i]["id"] for i in ids) for ids in d.batches],
        )

    first, later = groups(fresh, 1), groups(fresh, 2)
    assert first[0] != later[0] and groups(fresh, 1) == first
    assert [it["id"] for it in fresh.items[:60]] == [it["id"] for it in items]
    made2 = groups(fresh, 2)[0]
    assert len(fresh.labels) == len(fresh.items) == 60 + len(made2) == 60 + fresh.composites
    assert {i for ids in fresh.batches for i in ids} == set(range(len(fresh.items)))
    assert groups(data, 1)[0] == groups(data, 2)[0]  # without it: one fixed set


def test_error_weight_counts_the_targets_own_errors_more(tmp_path: Path, monkeypatch) -> None:
    """train.py --error-weight: the target's transcript tokens outside the matching blocks
    against the reference text weigh W, the rest (and EOS) 1; composites join the weights
    as they join the labels; padding weighs nothing; without --labels target it is refused."""
    import json
    import sys

    import numpy as np

    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    import train

    tok = train.load_tokenizer()
    assert train.error_weights([5, 6, 7, 8], [5, 9, 7, 8], 3.0) == [1.0, 3.0, 1.0, 1.0]
    assert train.error_weights([5, 6], [], 2.0) == [2.0, 2.0]
    texts = ["the quick brown fox", "a lazy dog", "over the dog", "the brown fox jumps"]
    heard = ["the quick brown box", "a lazy dog", "over a dog", "the brown fox jumps"]
    items, off = [], 0
    for i in range(40):
        items.append(
            {
                "id": f"u{i}",
                "setting": "read",
                "language": "en",
                "text": texts[i % 4],
                "offset": off,
                "frames": 200,
            }
        )
        off += 200
    shard = tmp_path / "train_shards" / "1"
    shard.mkdir(parents=True)
    np.save(shard / "features.npy", np.zeros((off, 80), dtype=np.float32))
    (shard / "index.json").write_text(json.dumps({"items": items}))
    distilled = {it["id"]: tok.encode(heard[i % 4]).ids for i, it in enumerate(items)}
    (shard / "target_tokens.json").write_text(json.dumps({"items": distilled}))
    monkeypatch.setattr(train, "WORK", tmp_path)

    data = train.Data("target", train.DataOptions(labels="target", concat=1.0, error_weight=4.0))
    assert data.weights is not None and len(data.weights) == len(data.labels)
    for k, it in enumerate(data.items):
        assert len(data.weights[k]) == len(data.labels[k])
        if "+" not in it["id"]:
            i = int(it["id"][1:])
            want = train.error_weights(distilled[it["id"]], tok.encode(texts[i % 4]).ids, 4.0)
            assert data.weights[k] == want
            assert (4.0 in want) == (heard[i % 4] != texts[i % 4])
    assert data.composites > 0
    k = next(k for k, it in enumerate(data.items) if "+" in it["id"])
    parts = data.items[k]["id"].split("+")
    assert data.weights[k] == [w for p in parts for w in data.weights[int(p[1:])]]
    b = next(b for b, ids in enumerate(data.batches) if k in ids)
    *_, tgt, _, wts = data.batch(b, "target")
    row = data.batches[b].index(k)
    n = len(data.labels[k])
    assert wts[row, :n].tolist() == data.weights[k] and wts[row, n] == 1.0  # EOS
    assert bool((wts[tgt == -100] == 0).all())
    plain = train.Data("target", train.DataOptions(labels="target"))
    assert plain.weights is None and plain.batch(0, "target")[-1] is None
    with pytest.raises(SystemExit, match="--labels target"):
        train.Data("target", train.DataOptions(error_weight=4.0))


def test_shared_encoder_drafter_reads_the_targets_exported_encoder_states(tmp_path: Path) -> None:
    """train.py --shared-encoder: the drafter's decoder on the target's encoder, copied exactly
    and frozen; export.py then ships only its cross-attention projection, which on the target's
    exported ``hidden`` output gives the drafter's own cross K/V; from_onnx.py reads the
    weights back; float16-exact initializers are stored as float16 without loss."""
    import sys

    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    import export
    import from_onnx
    import train
    from models import DRAFTER, SHARED_DRAFTER, TARGET, Seq2Seq

    torch.manual_seed(0)
    tgt, old = Seq2Seq(TARGET), Seq2Seq(DRAFTER)
    with (
        torch.no_grad()
    ):  # trained-like weights: the exporter shares identical fresh LayerNorm tensors
        for p in [*tgt.parameters(), *old.parameters()]:
            p.normal_(0.0, 0.05)
    torch.save({"model": tgt.state_dict()}, tmp_path / "t.pt")
    torch.save({"model": old.state_dict()}, tmp_path / "d.pt")
    m = Seq2Seq(SHARED_DRAFTER)
    train.init_shared(m, tmp_path / "t.pt", tmp_path / "d.pt")
    sd = m.state_dict()
    assert all(
        torch.equal(v, tgt.state_dict()[k]) for k, v in sd.items() if k.startswith("encoder.")
    )
    assert torch.equal(
        sd["decoder.layers.1.mlp.0.weight"], old.state_dict()["decoder.layers.1.mlp.0.weight"]
    )
    assert sd["decoder.layers.0.ck.weight"].shape == (
        192,
        256,
    )  # fresh: 256-wide encoder in, 192 out

    tgt.eval()
    m.eval()
    enc_path, cross_path = tmp_path / "enc.onnx", tmp_path / "cross.onnx"
    mel = torch.randn(1, 123, 80) * 0.3
    with torch.no_grad():
        export._export(
            export.EncoderExport(tgt),
            (mel,),
            enc_path,
            ["mel"],
            ["cross_k", "cross_v", "hidden"],
            {"mel": {1: "frames"}, "cross_k": {3: "s"}, "cross_v": {3: "s"}, "hidden": {1: "s"}},
        )
        hidden = export.EncoderExport(tgt)(mel)[2]
        export._export(
            export.CrossExport(m),
            (hidden,),
            cross_path,
            ["hidden"],
            ["cross_k", "cross_v"],
            {"hidden": {1: "s"}, "cross_k": {3: "s"}, "cross_v": {3: "s"}},
        )
        want = export.EncoderExport(m)(mel)  # the drafter encoding the audio itself
    import onnxruntime as ort

    (h,) = ort.InferenceSession(str(enc_path), providers=["CPUExecutionProvider"]).run(
        ["hidden"], {"mel": mel.numpy()}
    )
    got = ort.InferenceSession(str(cross_path), providers=["CPUExecutionProvider"]).run(
        None, {"hidden": h}
    )
    assert max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want[:2])) < 1e-4
    found = {
        **{k: v for k, v in from_onnx.onnx_params(enc_path).items() if k.startswith("encoder.")},
        **from_onnx.onnx_params(cross_path),
    }
    assert {k for k in sd if k.startswith("encoder.") or ".ck." in k or ".cv." in k} <= set(found)
    assert all(np.array_equal(v, sd[k].numpy()) for k, v in found.items())

    with torch.no_grad():  # weights that are exactly float16 are stored as float16, losslessly
        for p in tgt.encoder.parameters():
            p.copy_(p.half().float())
        export._export(
            export.EncoderExport(tgt),
            (mel,),
            enc_path,
            ["mel"],
            ["cross_k", "cross_v", "hidden"],
            {"mel": {1: "frames"}, "cross_k": {3: "s"}, "cross_v": {3: "s"}, "hidden": {1: "s"}},
        )
        before = enc_path.stat().st_size
        saved = export.store_exact_fp16(enc_path)
        want = export.EncoderExport(tgt)(mel)
    assert saved > 0.3 * before and enc_path.stat().st_size < before - saved * 0.9
    assert export._check(enc_path, {"mel": mel.numpy()}, [x.numpy() for x in want]) < 1e-4
    assert all(
        np.array_equal(v, tgt.state_dict()[k].numpy())
        for k, v in from_onnx.onnx_params(enc_path).items()
        if k.startswith("encoder.")
    )


def test_deeper_shared_drafter_starts_as_its_warm_start(tmp_path: Path) -> None:
    """train.py --dec-layers: a decoder layer the warm start lacks starts as the identity, so
    the deeper drafter predicts exactly what the drafter it grew from does; training moves it."""
    import dataclasses
    import sys

    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
    import train
    from models import SHARED_DRAFTER, TARGET, Seq2Seq

    torch.manual_seed(1)
    tgt, old = Seq2Seq(TARGET), Seq2Seq(SHARED_DRAFTER)
    with torch.no_grad():
        for p in [*tgt.parameters(), *old.parameters()]:
            p.normal_(0.0, 0.05)
    torch.save({"model": tgt.state_dict()}, tmp_path / "t.pt")
    torch.save({"model": old.state_dict()}, tmp_path / "d.pt")
    deep = Seq2Seq(dataclasses.replace(SHARED_DRAFTER, dec_layers=SHARED_DRAFTER.dec_layers + 1))
    train.init_shared(deep, tmp_path / "t.pt", tmp_path / "d.pt")
    train.init_shared(old, tmp_path / "t.pt", tmp_path / "d.pt")  # the same encoder in both
    new = deep.decoder.layers[-1]
    with torch.no_grad():
        assert (
            float(
                new.o.weight.abs().sum() + new.co.weight.abs().sum() + new.mlp[2].weight.abs().sum()
            )
            == 0.0
        )
        assert (
            float(new.qkv.weight.abs().sum()) > 0
        )  # the rest of the layer is fresh, ready to learn
    deep.eval()
    old.eval()
    mel = torch.randn(200, 80) * 0.3
    with torch.no_grad():
        assert train.greedy(deep, mel, limit=20) == train.greedy(old, mel, limit=20)
        enc, _ = old.encoder(mel[None])
        tokens = torch.tensor([[train.SOT, 5, 9, 11]])
        a = old.decoder(tokens, *old.decoder.empty_past(1), *old.decoder.cross_kv(enc))[0]
        b = deep.decoder(tokens, *deep.decoder.empty_past(1), *deep.decoder.cross_kv(enc))[0]
    assert torch.allclose(a, b, atol=1e-6)
