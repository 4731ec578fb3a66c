"""The decoder adapters' two ways of handing values to ONNX Runtime (as2d_cli/models/ortio.py):
OrtValues kept between calls (the default) give the numpy feeds' logits bit for bit, over a
decode with K-wide calls, rollbacks and a cache decoded from twice; rollback copies once; the
OrtValue calls are booked as the numpy ones are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.errors import UserError
from as2d_cli.models.loader import open_seq2seq
from as2d_cli.models.model_pair import ModelPair, load_pair
from as2d_cli.models.ortio import as_array, cache_length, truncate_cache
from as2d_cli.models.pair import import_pair
from as2d_cli.models.session import Seq2SeqModel
from as2d_cli.models.sources import LookaheadSource
from as2d_cli.models.timing import booked_wall_ns, ledger

DATA = Path(__file__).parent / "data"
BUNDLE = load_pair()
WINDOWS = load_corpus().split("dev")[:2]


@pytest.fixture(scope="module")
def alm(tmp_path_factory: pytest.TempPathFactory) -> ModelPair:
    """The audio-LLM fixture target with the Whisper-layout drafter (a split decoder)."""
    data = DATA / "audio_llm"
    return load_pair(
        import_pair(
            data / "target", DATA / "whisper" / "drafter", tmp_path_factory.mktemp("a") / "p"
        )
    )


def _script(model: Any, audio: np.ndarray, language: str, steps: int = 12) -> list[Any]:
    """A verifier's decode: the prompt, then calls of the last token and two guesses of which
    only the model's greedy choice is kept (the cache rolled back two positions), every third
    call kept whole, every fourth repeated from the same cache. Every call's logits, in order,
    then the tokens."""
    cross = model.encode(audio, language)
    logits, cache = model.decode(list(cross.prompt), model.empty_cache(), cross)
    out: list[Any] = [logits]
    toks = [int(logits[-1].argmax())]
    for step in range(steps):
        feed = [toks[-1], (toks[-1] + 1) % 50 + 4, 7]
        if step % 4 == 3:  # a cache is never changed in place: decoding from it again is equal
            again, _ = model.decode(feed, cache, cross)
            out.append(again)
        logits, cache = model.decode(feed, cache, cross)
        out.append(logits)
        if step % 3 == 2:
            toks += feed[1:]
        else:
            cache = truncate_cache(cache, cache_length(cache) - 2)
        toks.append(int(logits[-1 if step % 3 == 2 else 0].argmax()))
    assert cache_length(cache) == len(cross.prompt) + len(toks) - 1
    kinds = {isinstance(x, np.ndarray) for x in (*cache[0], *cache[1])}
    assert kinds == {model.io == "numpy"}  # the path under test is the one asked for
    return [*out, toks]


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b) and a[-1] == b[-1]  # the tokens
    for x, y in zip(a[:-1], b[:-1]):
        assert x.dtype == y.dtype == np.float32 and np.array_equal(x, y)


@pytest.mark.parametrize("name", ["target", "drafter"])
def test_the_bundled_pair_decodes_identically_both_ways(name: str) -> None:
    old, new = Seq2SeqModel(BUNDLE, name, io="numpy"), Seq2SeqModel(BUNDLE, name)
    assert new.io == "ortvalue"
    for w in WINDOWS:
        audio = w.load_audio()
        _same(_script(old, audio, w.language), _script(new, audio, w.language))


def test_the_lookahead_source_drafts_identically_both_ways() -> None:
    """decode_ahead's second output, and a rejected guess's position dropped each step."""
    audio = WINDOWS[0].load_audio()
    runs = []
    for io in ("numpy", "ortvalue"):
        src = LookaheadSource(Seq2SeqModel(BUNDLE, "drafter", ahead=True, io=io), audio)
        src.start()
        steps = []
        while (unit := src.step()) is not None:
            steps.append(list(unit))
        runs.append(steps)
    assert runs[0] == runs[1] and any(len(s) == 1 for s in runs[0][1:])


@pytest.mark.parametrize("name", ["target", "drafter"])
def test_the_audio_llm_fixture_decodes_identically_both_ways(alm: ModelPair, name: str) -> None:
    """The audio LLM (embed call, audio rows, mask and positions) and the Whisper-layout
    drafter (first call computing the cross K/V, then the with-past decoder)."""
    old, new = open_seq2seq(alm, name, io="numpy"), open_seq2seq(alm, name)
    assert type(new).__name__ == ("AudioLlmModel" if name == "target" else "WhisperModel")
    w = WINDOWS[0]
    _same(_script(old, w.load_audio(), w.language), _script(new, w.load_audio(), w.language))


def test_a_merged_whisper_decoder_decodes_identically_both_ways(tmp_path: Path) -> None:
    data = DATA / "whisper"
    pair = load_pair(import_pair(data / "target", data / "drafter", tmp_path / "w"))
    old, new = open_seq2seq(pair, "target", io="numpy"), open_seq2seq(pair, "target")
    assert getattr(new, "with_past", 0) is None  # the merged file (use_cache_branch)
    w = WINDOWS[1]
    _same(_script(old, w.load_audio(), w.language), _script(new, w.load_audio(), w.language))


def test_a_whisper_request_rebinds_from_its_cross_kv(alm: ModelPair) -> None:
    """Feeds made by another model object (or none) are remade from ``cross.k``/``cross.v``."""
    old, new = open_seq2seq(alm, "drafter", io="numpy"), open_seq2seq(alm, "drafter")
    w = WINDOWS[0]
    crosses = [m.encode(w.load_audio(), w.language) for m in (old, new)]
    (la, pa), (lb, pb) = (
        m.decode(list(c.prompt), m.empty_cache(), c) for m, c in zip((old, new), crosses)
    )
    crosses[1].feeds = None
    (la, _), (lb, _) = (m.decode([5, 6], p, c) for m, p, c in zip((old, new), (pa, pb), crosses))
    assert crosses[1].feeds is not None and np.array_equal(la, lb)


def test_rollback_copies_once_into_what_the_next_call_reads() -> None:
    model = Seq2SeqModel(BUNDLE, "drafter")
    cross = model.encode(WINDOWS[0].load_audio())
    _, cache = model.decode([BUNDLE.vocab.sot, 40, 41, 42, 43], model.empty_cache(), cross)
    assert truncate_cache(cache, 5) is cache  # nothing dropped: no copy
    back = truncate_cache(cache, 3)
    for old, new in zip((*cache[0], *cache[1]), (*back[0], *back[1])):
        a, b = as_array(old), as_array(new)
        assert b.shape == (*a.shape[:2], 3, a.shape[3]) and b.flags.c_contiguous
        assert np.array_equal(b, a[:, :, :3]) and not np.shares_memory(a, b)
    assert cache_length(back) == 3


def test_the_ortvalue_calls_are_booked_as_the_numpy_ones(alm: ModelPair) -> None:
    """Same ORT calls per decode on each path (the native time split counts them), and a
    booked wall time for each."""
    w = WINDOWS[0]
    counts = []
    for io in ("numpy", "ortvalue"):
        model: Any = open_seq2seq(alm, "target", io=io)  # embed + decoder per call
        cross = model.encode(w.load_audio(), w.language)
        before, booked = ledger().calls, booked_wall_ns(model)
        _, cache = model.decode(list(cross.prompt), model.empty_cache(), cross)
        model.decode([5], cache, cross)
        counts.append(ledger().calls - before)
        assert booked_wall_ns(model) > booked
    assert counts == [4, 4]


def test_an_unknown_io_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="decoder io 'arrays' is not one of ortvalue, numpy"):
        Seq2SeqModel(BUNDLE, "drafter", io="arrays")


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 17),
    vocab=st.integers(2, 64),
    levels=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_top2_margin_equals_a_partitions_values(
    rows: int, vocab: int, levels: int, seed: int
) -> None:
    """Every call's margins (Appendix F.6) come from the masked maximum; they equal the
    partition's gap exactly, ties (few distinct logits) included, in every leading shape."""
    from as2d_cli.models.session import top2_margin

    rng = np.random.default_rng(seed)
    logits = rng.integers(0, levels, size=(rows, vocab)).astype(np.float32) * 0.37
    part = np.partition(logits, -2, axis=-1)
    expected = part[..., -1] - part[..., -2]
    assert np.array_equal(top2_margin(logits), expected)
    assert np.array_equal(top2_margin(logits[None]), expected[None])
    assert np.array_equal(top2_margin(logits[0]), expected[0])
