"""The arm64 bundle really runs: under qemu-aarch64-static with its loader invoked
explicitly, a clean environment and an arm64 /proc/cpuinfo, it decodes a real ONNX model
in two threads and gives the same tokens as the host's Python."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from test_bundle_common import (
    DECODE_SCRIPT,
    STEPS,
    host_decode,
    need_qemu,
    shared_build,
    toy_decoder,
    unpacked,
)

from as2d_cli.bundle import launch, qemu


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_qemu()
    return unpacked(tmp_path_factory.mktemp("qemu"))


def test_bundle_decodes_same_tokens_as_host_in_two_threads(
    bundle_dir: Path, tmp_path: Path
) -> None:
    model = toy_decoder(tmp_path / "toy.onnx")
    script = tmp_path / "decode.py"
    script.write_text(DECODE_SCRIPT)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(qemu.arm64_cpuinfo())
    home = tmp_path / "home"
    home.mkdir()
    start = launch.launch(
        shared_build().manifest,
        str(bundle_dir),
        [str(script), str(model)],
        home=str(home),
        tmpdir=str(home),
    )
    t0 = time.monotonic()
    proc = qemu.run(bundle_dir, start.argv, start.env, cpuinfo=cpuinfo, timeout=240)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    want = host_decode(script, model)
    assert got["numpy"] == "2.4.6" and got["ort"] == "1.32.0"
    assert got["sha"] == want["sha"] and got["pruned_sqlite3"] is True
    assert set(got["results"]) == {"3", "11"}
    assert {r["thread"] for r in got["results"].values()} == {"t3", "t11"}
    for key, ref in want["results"].items():
        mine = got["results"][key]
        assert len(mine["tokens"]) == STEPS + 1
        assert mine["tokens"] == ref["tokens"], (key, mine["tokens"], ref["tokens"])
        np.testing.assert_allclose(mine["last_logits"], ref["last_logits"], rtol=1e-4, atol=1e-4)
    print(f"bundle decode under qemu: {seconds:.1f} s")


def test_guest_sees_arm64_cpuinfo_and_a_clean_environment(bundle_dir: Path, tmp_path: Path) -> None:
    """The guest reads the arm64 cpuinfo we bind-mount (onnxruntime's CPU detection
    crashes on the host's x86 text), and no host variable leaks in."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(qemu.arm64_cpuinfo(3))
    start = launch.launch(
        shared_build().manifest,
        str(bundle_dir),
        [
            "-c",
            "import numpy; print(open('/proc/cpuinfo').read().count('CPU part'), numpy.__version__)",
        ],
        home=str(tmp_path),
        tmpdir=str(tmp_path),
    )
    proc = qemu.run(bundle_dir, start.argv, start.env, cpuinfo=cpuinfo)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["3", "2.4.6"]
    # Host environment never leaks into the guest: only the launch variables (and PATH).
    start = launch.launch(
        shared_build().manifest,
        str(bundle_dir),
        ["-c", "import os, sys; print(sorted(k for k in os.environ)); print(sys.prefix)"],
        home=str(tmp_path),
        tmpdir=str(tmp_path),
        rseq_off=True,
    )
    proc = qemu.run(bundle_dir, start.argv, start.env, cpuinfo=cpuinfo)
    assert proc.returncode == 0, proc.stderr[-2000:]
    keys, prefix = proc.stdout.splitlines()
    assert sorted(set(eval(keys)) - {"PWD"}) == sorted([*start.env, "PATH"])  # noqa: S307 - our own repr of a list of names
    assert "GLIBC_TUNABLES" in start.env and prefix == str(bundle_dir / "python")


LIBS_SCRIPT = r"""
import json, sys
import numpy as np, soundfile as sf
from tokenizers import Tokenizer
data, rate = sf.read(sys.argv[1], dtype="float32")
np.save(sys.argv[3], data)
ids = Tokenizer.from_file(sys.argv[2]).encode("the quick brown fox jumps over the lazy dog, twice").ids
print(json.dumps({"rate": rate, "ids": ids}))
"""


def test_bundle_reads_corpus_audio_and_vocabulary_like_the_host(
    bundle_dir: Path, tmp_path: Path
) -> None:
    """soundfile (libsndfile) and tokenizers from their aarch64 wheels: the corpus audio
    decodes to the host's samples (to float rounding: Vorbis decoding is float code) and
    the vocabulary gives the host's token ids."""
    assets = Path(__file__).resolve().parents[1] / "as2d_cli" / "assets"
    audio = sorted((assets / "corpus" / "audio").glob("*.ogg"))[:1]
    vocab = assets / "models" / "tokenizer.json"
    if not audio or not vocab.is_file():
        pytest.skip("no shipped corpus audio or tokenizer in as2d_cli/assets yet")
    script = tmp_path / "libs.py"
    script.write_text(LIBS_SCRIPT)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(qemu.arm64_cpuinfo())
    start = launch.launch(
        shared_build().manifest,
        str(bundle_dir),
        [str(script), str(audio[0]), str(vocab), str(tmp_path / "arm.npy")],
        home=str(tmp_path),
        tmpdir=str(tmp_path),
    )
    proc = qemu.run(bundle_dir, start.argv, start.env, cpuinfo=cpuinfo)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import subprocess
    import sys

    host = subprocess.run(
        [sys.executable, str(script), str(audio[0]), str(vocab), str(tmp_path / "host.npy")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout) == json.loads(host.stdout)
    arm, ref = np.load(tmp_path / "arm.npy"), np.load(tmp_path / "host.npy")
    assert arm.shape == ref.shape and arm.size > 16000
    np.testing.assert_allclose(arm, ref, rtol=0, atol=1e-6)
