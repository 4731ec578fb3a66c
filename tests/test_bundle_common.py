"""Shared helpers for the bundle tests: one bundle build per test process, a toy ONNX
decoder, and the script that runs it in two threads (on the host and in the bundle).

The build uses the normal bundle cache (~/.cache/as2d/bundle, or $AS2D_BUNDLE_CACHE), so
only the first run on a machine downloads (~50 MB: 12 Debian packages, two wheels)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from as2d_cli.bundle import qemu
from as2d_cli.bundle.build import BuildResult, build_bundle, default_project_root, snapshot_project
from as2d_cli.bundle.pack import unpack
from as2d_cli.bundle.recipe import Recipe

VOCAB, HIDDEN, STEPS = 48, 24, 24

# Runs with whatever python starts it: two threads, each with its own session pinned to
# one intra-op thread, greedily decode from different start tokens. Also checks the
# stdlib modules the bundle keeps (and that the pruned ones are really gone).
DECODE_SCRIPT = r"""
import hashlib, json, sys, threading
import numpy as np
import onnxruntime as ort

model = sys.argv[1]
results = {}

def decode(start, key):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    token = np.array([start], dtype=np.int64)
    state = np.zeros((1, %(hidden)d), dtype=np.float32)
    tokens, margins = [start], []
    for _ in range(%(steps)d):
        logits, state = sess.run(["logits", "new_state"], {"token": token, "state": state})
        order = np.argsort(logits[0])
        margins.append(float(logits[0][order[-1]] - logits[0][order[-2]]))
        token = np.array([int(order[-1])], dtype=np.int64)
        tokens.append(int(order[-1]))
    results[key] = {"tokens": tokens, "min_margin": min(margins), "last_logits": logits[0].tolist(),
                    "thread": threading.current_thread().name}

threads = [threading.Thread(target=decode, args=(s, str(s)), name=f"t{s}") for s in (3, 11)]
for t in threads: t.start()
for t in threads: t.join()
try:
    import sqlite3  # pruned on purpose
    pruned = False
except ImportError:
    pruned = True
print(json.dumps({"results": results, "sha": hashlib.sha256(b"as2d").hexdigest(), "pruned_sqlite3": pruned,
                  "numpy": np.__version__, "ort": ort.__version__}))
""" % {"hidden": HIDDEN, "steps": STEPS}  # noqa: UP031 - a script template; braces in it are Python


@functools.lru_cache(maxsize=1)
def project_snapshot() -> Path:
    """A frozen copy of the checkout's bundled packages, so files others edit while the
    tests run cannot change the inputs between two builds (same content, same cache key)."""
    dest = Path(tempfile.mkdtemp(prefix="as2d-bundle-project-"))
    atexit.register(shutil.rmtree, dest, True)
    return snapshot_project(Recipe(), default_project_root(), dest)


@functools.lru_cache(maxsize=1)
def shared_build() -> BuildResult:
    """The bundle for the snapshot (a cache hit after the first build on a machine)."""
    return build_bundle(project_root=project_snapshot())


def unpacked(tmp_root: Path) -> Path:
    """The shared bundle extracted under ``tmp_root`` (once per test process)."""
    dest = tmp_root / "bundle"
    if not (dest / "manifest.json").is_file():
        unpack(shared_build().archive, dest)
    return dest


def toy_decoder(path: Path, seed: int = 7) -> Path:
    """A small recurrent decoder as ONNX: token, state -> logits, new_state."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    emb = rng.normal(0, 1.0, (VOCAB, HIDDEN)).astype(np.float32)
    rec = rng.normal(0, 0.4, (HIDDEN, HIDDEN)).astype(np.float32)
    out = rng.normal(0, 3.0, (HIDDEN, VOCAB)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "token"], ["e"], axis=0),
        helper.make_node("MatMul", ["state", "rec"], ["r"]),
        helper.make_node("Add", ["e", "r"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["new_state"]),
        helper.make_node("MatMul", ["new_state", "out"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "toy_decoder",
        [
            helper.make_tensor_value_info("token", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, HIDDEN]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, VOCAB]),
            helper.make_tensor_value_info("new_state", TensorProto.FLOAT, [1, HIDDEN]),
        ],
        [
            numpy_helper.from_array(emb, "emb"),
            numpy_helper.from_array(rec, "rec"),
            numpy_helper.from_array(out, "out"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def host_decode(script: Path, model: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, str(script), str(model)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def need_qemu() -> None:
    """Skip where qemu-user-static is missing, except in CI where .ci/run installs it."""
    if qemu.qemu_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("qemu-aarch64-static missing in CI; .ci/run must install qemu-user-static")
        pytest.skip("qemu-aarch64-static not installed (apt-get install qemu-user-static)")
