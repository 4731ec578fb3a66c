"""Bundle build and start-up figures, measured in one run (docs/phones.md quotes them).

    python benchmarks/bundle_build.py [--no-rebuild]

1. `build_bundle()` as a user gets it (a cache hit after the first build);
2. a rebuild from the cached downloads with the finished bundle removed: time, and whether
   the archive bytes and manifest hash are identical (reproducibility);
3. under qemu-aarch64-static (explicit loader, arm64 cpuinfo): Python start-up and
   `import numpy, onnxruntime`, median of 3, against the host's Python in the same run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from as2d_cli.bundle import launch, qemu
from as2d_cli.bundle.build import build_bundle, default_project_root, snapshot_project
from as2d_cli.bundle.cache import sha256_file
from as2d_cli.bundle.pack import unpack
from as2d_cli.bundle.recipe import Recipe


def _median_seconds(run, n: int = 3) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for _ in range(n):
        t0 = time.monotonic()
        run()
        samples.append(time.monotonic() - t0)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-rebuild", action="store_true", help="skip the reproducibility rebuild")
    args = ap.parse_args()

    # A frozen copy of the checkout: the rebuild must see exactly the same inputs.
    project = snapshot_project(
        Recipe(), default_project_root(), Path(tempfile.mkdtemp(prefix="as2d-bench-"))
    )
    first = build_bundle(project_root=project)
    print(
        f"build: {'cache hit' if first.cache_hit else 'built'} in {first.seconds:.1f} s -> {first.archive}"
    )
    print(
        f"size: {first.manifest['totals']['files']} files, {first.unpacked_bytes / 1e6:.1f} MB unpacked, "
        f"{first.archive_bytes / 1e6:.1f} MB packed"
    )
    by_comp: dict[str, int] = {}
    for f in first.manifest["files"]:
        by_comp[f["component"]] = by_comp.get(f["component"], 0) + f["size"]
    print(
        "by component (MB): "
        + ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sorted(by_comp.items(), key=lambda kv: -kv[1]))
    )
    ok = True
    if not args.no_rebuild:
        digest = sha256_file(first.archive)
        saved = first.archive.parent.with_name(first.archive.parent.name + ".bench-saved")
        shutil.rmtree(saved, ignore_errors=True)
        first.archive.parent.rename(saved)
        try:
            again = build_bundle(project_root=project)
            same = (
                sha256_file(again.archive) == digest and again.manifest_hash == first.manifest_hash
            )
        finally:
            shutil.rmtree(saved, ignore_errors=True)
        ok &= same
        print(
            f"rebuild from cached downloads: {again.seconds:.1f} s; identical archive and manifest hash: {same}"
        )

    if qemu.qemu_binary() is None:
        print("qemu-aarch64-static not installed: start-up figures skipped")
        shutil.rmtree(project, ignore_errors=True)
        return 0 if ok else 1
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        unpack(first.archive, tmp / "b")
        cpuinfo = tmp / "cpuinfo"
        cpuinfo.write_text(qemu.arm64_cpuinfo())

        def guest(code: str) -> None:
            start = launch.launch(
                first.manifest, str(tmp / "b"), ["-c", code], home=str(tmp), tmpdir=str(tmp)
            )
            proc = qemu.run(tmp / "b", start.argv, start.env, cpuinfo=cpuinfo)
            assert proc.returncode == 0, proc.stderr[-1000:]

        def host(code: str) -> None:
            subprocess.run([sys.executable, "-c", code], check=True)

        guest("import numpy, onnxruntime")  # first start writes __pycache__, as on a phone
        for label, code in (
            ("python start", "pass"),
            ("import numpy, onnxruntime", "import numpy, onnxruntime"),
        ):
            g, h = _median_seconds(lambda c=code: guest(c)), _median_seconds(lambda c=code: host(c))
            print(f"{label}: qemu {g:.2f} s, host {h:.2f} s, ratio {g / h:.1f}x")
    shutil.rmtree(project, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
