"""The shipped corpus: manifest contract, split sizes and disjointness, audio, `as2d corpus list`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from as2d_cli.corpus.manifest import SETTINGS, load_corpus
from as2d_cli.corpus.text import char_errors, normalize_text, wer, word_errors
from as2d_cli.errors import FormatError, UserError

CORPUS = load_corpus()


def test_split_sizes_and_settings() -> None:
    counts = Counter(w.split for w in CORPUS.windows)
    assert counts["dev"] >= 50 and counts["val"] >= 100 and counts["test"] >= 300
    per_setting = Counter(w.setting for w in CORPUS.split("test"))
    assert set(per_setting) == set(SETTINGS)
    assert min(per_setting.values()) >= 40
    langs = {w.language for w in CORPUS.windows if w.setting == "multilingual"}
    assert "en" in langs and len(langs) >= 2


def test_windows_are_4_to_20_seconds_and_audio_matches() -> None:
    assert all(4.0 <= w.seconds <= 20.0 for w in CORPUS.windows)
    for w in CORPUS.split("dev")[::7]:
        audio = w.load_audio()
        assert audio.dtype == np.float32 and audio.ndim == 1
        assert abs(len(audio) / 16000 - w.seconds) < 0.1
        assert float(np.sqrt(np.mean(audio**2))) > 1e-3  # real speech, not silence


def test_splits_are_disjoint() -> None:
    ids = [w.id for w in CORPUS.windows]
    assert len(ids) == len(set(ids))
    audio = [w.audio for w in CORPUS.windows]
    assert len(audio) == len(set(audio))

    def grams(split: str) -> set[tuple[str, ...]]:
        out = set()
        for w in CORPUS.split(split):
            words = w.text.split()
            out |= {tuple(words[i : i + 8]) for i in range(len(words) - 7)}
        return out

    test, val, dev = grams("test"), grams("val"), grams("dev")
    assert test and val and dev
    assert not (test & val) and not (test & dev) and not (val & dev)


def test_text_is_varied_and_normalised() -> None:
    words = {x for w in CORPUS.windows for x in w.text.split()}
    assert len(words) >= 1000
    assert all(w.text == normalize_text(w.text) and w.text for w in CORPUS.windows)


def test_wer() -> None:
    assert word_errors("the cat sat", "the cat sat") == (0, 3)
    assert word_errors("the cat sat", "a cat sat down") == (2, 3)
    assert char_errors("the cat sat", "the cat sat") == (0, 11)
    assert char_errors("The office", "the officer!") == (1, 10)  # normalised, one insertion
    assert char_errors("abc", "") == (3, 3)
    assert wer(["a b", "c d e f"], ["a", "c d e f"]) == pytest.approx(1 / 6)


def _copy_manifest(tmp_path: Path, edit) -> Path:
    data = json.loads(CORPUS.path.read_text())
    edit(data)
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema="other"), "schema"),
        (lambda d: d.update(version=3), "upgrade as2d"),
        (lambda d: d.update(version=0), "not supported"),
        (lambda d: d["windows"][0].pop("text"), "'text'"),
        (lambda d: d["windows"][1].update(id=d["windows"][0]["id"]), "twice"),
        (lambda d: d["windows"][0].update(split="train"), "unknown split"),
        (lambda d: d["windows"][0].update(translation=3), "'translation'"),
        (lambda d: d["windows"][0].update(translation="a b"), "unknown split/setting"),
        (lambda d: d["requests"][0].pop("answer"), r"requests\[0\]"),
        (lambda d: d["requests"][0].update(window="test-read-000"), "of a window of its split"),
        (lambda d: d["requests"][0].update(task="transcribe"), "task 'answer'"),
        (lambda d: d["requests"][1].update(id=d["requests"][0]["id"]), "unique"),
        (lambda d: d["requests"][0].update(id=d["windows"][0]["id"]), "differ from the window"),
    ],
)
def test_bad_manifest_is_refused(tmp_path: Path, edit, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        load_corpus(_copy_manifest(tmp_path, edit))


def test_version_1_manifest_reads_as_asr_windows_only(tmp_path: Path) -> None:
    def v1(d: dict) -> None:
        d["version"] = 1
        d["windows"] = [w for w in d["windows"] if "translation" not in w]
        del d["requests"]

    old = load_corpus(_copy_manifest(tmp_path, v1))
    assert old.windows == tuple(
        w.__class__(**{**w.__dict__, "audio": tmp_path / w.audio.relative_to(CORPUS.path.parent)})
        for w in CORPUS.windows
    )
    assert old.translations == () and old.questions == ()
    assert old.requests("answer", "test") == [] and len(old.requests("transcribe", "test")) == 320


def test_tasks_in_the_papers_proportions() -> None:
    """Translation windows per direction and QA requests per split (docs/corpus.md)."""
    for split, (per_direction, qa) in {"dev": (12, 24), "val": (12, 24), "test": (36, 36)}.items():
        tr = CORPUS.requests("translate", split)
        assert Counter(r.setting for r in tr) == {"de-en": per_direction, "es-en": per_direction}
        assert {r.language for r in tr} == {"de", "es"}
        assert all(r.reference == r.translation and r.task == "translate" for r in tr)
        questions = CORPUS.requests("answer", split)
        assert len(questions) == qa and len({q.of for q in questions}) == qa
        for q in questions:  # a request is its window's audio with a question of its own
            w = CORPUS.get(q.of)
            assert (q.split, q.audio, q.seconds, q.text) == (w.split, w.audio, w.seconds, w.text)
            assert q.task == "answer" and q.setting == "qa" and q.question and q.reference
    # the ASR windows are what every command reads by default; the new ones are apart
    assert all(w.task == "transcribe" for w in CORPUS.windows)
    assert all(w.task == "translate" for w in CORPUS.translations)
    assert CORPUS.get(CORPUS.translations[0].id) == CORPUS.translations[0]
    assert CORPUS.get(CORPUS.questions[0].id) == CORPUS.questions[0]
    assert CORPUS.seconds()[CORPUS.questions[0].id] == CORPUS.questions[0].seconds


def test_translation_references_and_answers_come_from_the_spoken_text() -> None:
    from as2d_cli.corpus.questions import ask, number_value, words_of

    for w in CORPUS.translations:
        assert 4.0 <= w.seconds <= 20.0
        assert w.translation == normalize_text(w.translation) and w.translation
        assert len(set(w.text.split()) & set(w.translation.split())) < len(w.text.split())
    kinds = Counter()
    for q in CORPUS.questions:
        words = words_of(q.text)
        kinds[q.kind] += 1
        if q.kind == "number":
            assert int(q.reference) in {number_value(x, q.language) for x in words} | {100}
        elif q.kind == "language":
            assert q.reference in ("English", "German", "Spanish")
        elif q.kind == "first-word":
            assert q.reference == words[0]
        elif q.kind == "last-words":
            assert q.reference == " ".join(words[-3:])
        elif q.kind == "count":
            word = q.question.split('"')[1]
            assert q.reference == str(words.count(word))
        else:
            word = q.question.split('"')[1]
            assert words.count(word) == 1 and words[words.index(word) + 1] == q.reference
    assert len(kinds) == 6
    assert ask("number", "it costs one hundred euros".split(), "en", 0).answer == "100"
    assert ask("number", "hay dos perros".split(), "es", 0).answer == "2"
    assert ask("number", "no numbers here".split(), "en", 0) is None


def test_missing_manifest_and_audio(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_corpus(tmp_path)
    corpus = load_corpus(_copy_manifest(tmp_path, lambda d: None))
    with pytest.raises(UserError, match="missing"):
        corpus.windows[0].load_audio()


def _as2d(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "as2d_cli.cli.main", *args], capture_output=True, text=True
    )


def test_cli_list_json_matches_manifest() -> None:
    proc = _as2d("corpus", "list", "--split", "test", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    test = CORPUS.split("test")
    assert [r["id"] for r in rows] == [w.id for w in test]
    assert set(rows[0]) == {"id", "setting", "language", "seconds", "split"}
    assert all(r["split"] == "test" for r in rows)


def test_cli_list_table_and_errors(tmp_path: Path) -> None:
    proc = _as2d("corpus", "list", "--split", "dev")
    assert proc.returncode == 0
    assert "dev-read-000" in proc.stdout and f"{len(CORPUS.split('dev'))} windows" in proc.stdout
    bad = _as2d("corpus", "list", "--split", "train")
    assert bad.returncode == 2 and "unknown split" in bad.stderr and "Traceback" not in bad.stderr
    shutil.copy(CORPUS.path, tmp_path / "manifest.json")
    (tmp_path / "manifest.json").write_text("{not json")
    bad = _as2d("corpus", "list", "--corpus", str(tmp_path))
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr and "Traceback" not in bad.stderr


def test_traces_build_unknown_split_is_one_line(tmp_path: Path) -> None:
    """An unknown split is refused before the progress bar starts: one line, nothing written."""
    bad = _as2d("traces", "build", "--split", "train", "--out", str(tmp_path / "t.jsonl.gz"))
    assert bad.returncode == 2 and bad.stderr.splitlines() == [bad.stderr.strip()]
    assert bad.stderr.startswith("error: unknown split 'train'") and not list(tmp_path.iterdir())
