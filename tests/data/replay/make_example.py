"""Regenerate the small committed replay example (run from the repository root):

    python tests/data/replay/make_example.py

12 synthetic windows (6 dev, 6 val; one capped FLEURS reference; three sources, one of
them language-ineligible on some windows) and a K70-like synthetic profile measured to
K13, so ASP's default cap is 12. The golden outputs in golden/ pin `as2d replay --json`
on these files; regenerate them with AS2D_UPDATE_GOLDEN=1 after an intended change.
"""

from __future__ import annotations

from pathlib import Path

from as2d_cli.formats.profile_io import write_profile
from as2d_cli.formats.trace import TraceSet
from as2d_cli.formats.trace_io import write_traces
from as2d_cli.synthetic import synthetic_profile, synthetic_traces

HERE = Path(__file__).resolve().parent
SMALL = {"librispeech": 2, "ami": 1, "fleurs": 1, "kespeech": 1, "m4singer": 1}


def main() -> None:
    dev = synthetic_traces(seed=11, datasets=SMALL, split="dev", drafter_cap=12)
    val = synthetic_traces(seed=12, datasets=SMALL, split="val", drafter_cap=12, anchor=False)
    ts = TraceSet(
        dev.provenance, dev.eos_id, dev.sources, dev.default_source, dev.windows + val.windows
    )
    write_traces(HERE / "traces.jsonl.gz", ts, force=True)
    write_profile(HERE / "profile.yaml", synthetic_profile(max_width=13), force=True)


if __name__ == "__main__":
    main()
