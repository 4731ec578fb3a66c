"""Record the runner conformance vectors (tests/data/runner/vectors.jsonl).

Each vector is one command and what a conforming runner must answer: the terminal event,
and for a decode the committed tokens (every method must give the target's greedy
tokens, recorded here from target-only). The header pins the model files' hashes, so
vectors are re-recorded whenever the bundled models change:

    python training/record_runner_vectors.py
"""

from __future__ import annotations

import json
from pathlib import Path

from as2d_cli.corpus.manifest import load_corpus
from as2d_cli.formats import registry
from as2d_cli.launch.host import LocalRunner
from as2d_cli.models.model_pair import load_pair
from native.protocol import PROTOCOL, PROTOCOL_VERSION

SCHEMA, VERSION = registry.name_version("as2d.runner-vectors")
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "runner" / "vectors.jsonl"
MAX = 40


def main() -> None:
    pair = load_pair()
    corpus = load_corpus()
    windows = []
    for setting in ("read", "multilingual"):
        ws = sorted(
            (w for w in corpus.split("dev") if w.setting == setting), key=lambda w: w.seconds
        )
        windows.append(ws[0].id)
    r = LocalRunner()
    r.call({"op": "hello"})
    r.call({"op": "load"})
    vectors = []
    for wid in windows:
        ref = r.call(
            {
                "op": "decode",
                "window": wid,
                "method": "target-only",
                "max_tokens": MAX,
                "events": False,
            }
        )
        for method, extra in (
            ("target-only", {}),
            ("sd", {"k": 6}),
            ("asp", {}),
            ("as2d", {"budget": 5}),
            ("as2d", {"source": "ctc"}),
            ("as2d", {"source": "lookahead", "budget": 5}),
            ("as2d-no-td", {"budget": 3}),
            ("as2d-no-bc", {}),
            (
                "as2d",
                {
                    "source": "external",
                    "candidates": [
                        {"t_ms": 0, "tokens": ref["tokens"][:20]},
                        {"t_ms": 5, "tokens": ref["tokens"][20:]},
                    ],
                },
            ),
        ):
            cmd = {"op": "decode", "window": wid, "method": method, "max_tokens": MAX, **extra}
            vectors.append({"command": cmd, "expect": {"event": "result", "tokens": ref["tokens"]}})
    for cmd, needle in (
        ({"op": "fly"}, "unknown op"),
        ({"op": "decode", "window": windows[0], "method": "magic"}, "'method' must be one of"),
        ({"op": "decode", "window": "no-such-window", "method": "sd"}, "no window"),
        (
            {
                "op": "decode",
                "window": windows[0],
                "method": "as2d",
                "source": "external",
                "candidates": [{"tokens": [1]}],
            },
            "t_ms",
        ),
    ):
        vectors.append({"command": cmd, "expect": {"event": "error", "message_contains": needle}})
    r.close()
    hashes = {name: info["sha256"] for name, info in pair.manifest["models"].items()}
    header = {
        "schema": SCHEMA,
        "version": VERSION,
        "protocol": PROTOCOL,
        "protocol_version": PROTOCOL_VERSION,
        "models": hashes,
        "tokenizer_sha256": pair.manifest["sha256"],
        "max_tokens": MAX,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(x) + "\n" for x in [header, *vectors]), encoding="utf-8")
    print(f"wrote {len(vectors)} vectors to {OUT}")


if __name__ == "__main__":
    main()
