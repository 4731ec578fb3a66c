"""Word error rate of the CTC source on the English development and validation windows.

This is the check that decides whether a continued CTC run ships (the test split is never
consulted for it): the same chunking and text as the As²d source (``CtcSource``), scored
against each window's reference text.

    python training/ctc_dev_wer.py [ONNX ...]

With no argument it scores the bundled ``ctc.onnx``; with files, each of them in turn (the
same character table and chunk length as the bundle), e.g. the shipped file set aside
before an export against the new one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from as2d_cli.corpus.manifest import load_corpus  # noqa: E402
from as2d_cli.corpus.text import word_errors  # noqa: E402
from as2d_cli.models.model_pair import load_pair  # noqa: E402
from as2d_cli.models.session import make_session  # noqa: E402
from as2d_cli.models.sources import CtcRecognizer, CtcSource  # noqa: E402


def ctc_wer(rec: CtcRecognizer, windows: list) -> tuple[int, int]:
    """(word errors, reference words) over ``windows``."""
    errors = words = 0
    for w in windows:
        src = CtcSource(rec, w.load_audio())
        src.start()
        while src.step() is not None:
            pass
        e, n = word_errors(w.text, " ".join(src.texts))
        errors += e
        words += n
    return errors, words


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "onnx", nargs="*", type=Path, help="CTC model files to score (default: the bundled one)"
    )
    a = ap.parse_args()
    rec = CtcRecognizer(load_pair(), threads=1)
    corpus = load_corpus()
    windows = [
        w for split in ("dev", "val") for w in corpus.split(split) if rec.eligible(w.language)
    ]
    for path in a.onnx or [None]:
        if path is not None:
            if not path.is_file():
                print(
                    f"error: {path} is not a file; give ONNX files of the CTC model",
                    file=sys.stderr,
                )
                return 2
            rec.session = make_session(path, 1)
        e, n = ctc_wer(rec, windows)
        print(
            f"{path or 'bundled ctc.onnx'}: WER {e / n:.4f} ({e}/{n} words, {len(windows)} English dev+val windows)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
