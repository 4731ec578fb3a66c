"""Ship the trained audio-LLM pair: import it into the package, trace it, price it on the K70
and select its deployments, so that `as2d eval --phone k70 --models audio-llm --task all`
runs from a clone with nothing else to do.

    python training/alm_ship.py [--exports DIR] [--target-variant V] [--drafter-variant V]
                                [--replace] [--processes N]

From ``DIR/target`` and ``DIR/drafter`` (default training/work/alm/export, what
training/alm_export.py writes), with the toolkit's own commands only (no torch):

1. ``as2d models import --copy --name audio-llm`` into ``as2d_cli/assets/pairs/audio-llm/``
   (``--target-variant`` and ``--drafter-variant``, default ``quantized`` each: the 8-bit
   files, which decode faster here: docs/measurements.md), ``source`` in models.json written relative
   to the repository; with ``--drafter-reads-target-encoder`` when the drafter's audio
   encoder file is the target's (``alm_train.py --freeze-shared``);
2. ``as2d traces build`` for the three tasks x dev, val, test (``traces/`` for transcribe,
   ``traces/translate/`` and ``traces/answer/``), each resumable;
3. ``training/make_k70_profile.py --pair``: ``as2d_cli/assets/profiles/k70.audio-llm.profile.yaml``;
4. ``as2d select-budget`` per task on that task's dev and val traces (the catalog of the
   bundled K70 deployment: thresholds 0.4-0.8, batches 1, 2, 4, 8, budgets 1-24, history
   off and on) into ``as2d_cli/assets/profiles/k70/deployment-audio-llm-<task>.yaml``;
5. ``as2d eval --phone k70 --models audio-llm --task all`` into training/work/alm/ship-check/
   as the check that every piece is where `eval` finds it.

Run again, it goes on where it stopped (a finished step is kept). ``--replace`` ships other
exports over a shipped pair: the old pair folder, its profile and its deployments are moved
to ``training/work/alm/replaced-<time>/`` first (never deleted).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from as2d_cli.evaluate.inputs import SHIPPED_PROFILES  # noqa: E402
from as2d_cli.formats.common import sha256_file  # noqa: E402
from as2d_cli.formats.layout import pair_profile_name  # noqa: E402
from as2d_cli.models.prompting import TASKS  # noqa: E402
from as2d_cli.models.shipped import SHIPPED_PAIRS  # noqa: E402

NAME = "audio-llm"
ALM = ROOT / "training" / "work" / "alm"
EXPORTS = ALM / "export"
SPLITS = ("dev", "val", "test")
# The catalog the bundled pair's shipped K70 deployment was selected from.
THRESHOLDS = "0.4,0.5,0.6,0.7,0.8"
BATCHES = "1,2,4,8"


def as2d(*args: str) -> None:
    """One toolkit command, from the repository (the files it records are relative)."""
    cmd = [sys.executable, "-m", "as2d_cli.cli.main", *args]
    print("$ as2d " + " ".join(args), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def rel(path: Path) -> str:
    return str(path.resolve().relative_to(ROOT))


def pair_dir() -> Path:
    return SHIPPED_PAIRS / NAME


def profile_path() -> Path:
    return SHIPPED_PROFILES / pair_profile_name("k70", NAME)


def deployment_path(task: str) -> Path:
    return SHIPPED_PROFILES / "k70" / f"deployment-{NAME}-{task}.yaml"


def traces_dir(task: str) -> Path:
    return pair_dir() / "traces" if task == "transcribe" else pair_dir() / "traces" / task


def same_exports(exports: Path) -> bool:
    """The shipped pair was imported from these very export files (each copied file's
    SHA-256 equals its export's)."""
    manifest = json.loads((pair_dir() / "models.json").read_text(encoding="utf-8"))
    for role, info in manifest["models"].items():
        for name, digest in info["sha256"].items():
            base = Path(name).name
            src = next((p for p in (exports / role).rglob(base)), None)
            if src is None or sha256_file(src) != digest:
                return False
    return True


def move_away() -> None:
    """The shipped pair, its profile and deployments into training/work/alm/replaced-<time>/."""
    dest = ALM / f"replaced-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    dest.mkdir(parents=True)
    for p in (pair_dir(), profile_path(), *(deployment_path(t) for t in TASKS)):
        if p.exists():
            shutil.move(str(p), str(dest / p.name))
    print(f"moved the shipped pair's files to {dest}", flush=True)


def same_encoder(exports: Path, target_variant: str | None, drafter_variant: str | None) -> bool:
    """Whether the drafter's audio encoder file is the target's (same bytes): a drafter
    trained with ``alm_train.py --freeze-shared``, which then reads the target's audio
    embeddings instead of encoding the audio again."""
    from as2d_cli.models.audio_llm_export import find_audio_llm_export

    t = find_audio_llm_export(exports / "target", target_variant).encoder
    d = find_audio_llm_export(exports / "drafter", drafter_variant).encoder
    return sha256_file(t) == sha256_file(d)


def import_pair(exports: Path, target_variant: str | None, drafter_variant: str | None) -> None:
    args = ["models", "import", "--target", str(exports / "target")]
    args += ["--drafter", str(exports / "drafter"), "--out", rel(pair_dir())]
    args += ["--copy", "--name", NAME]
    if target_variant:
        args += ["--variant", target_variant]
    if drafter_variant:
        args += ["--drafter-variant", drafter_variant]
    if same_encoder(exports, target_variant, drafter_variant):
        args += ["--drafter-reads-target-encoder"]  # trained with --freeze-shared
    pair_dir().parent.mkdir(parents=True, exist_ok=True)
    as2d(*args)
    # where the files came from, as a path in this repository rather than on this machine
    path = pair_dir() / "models.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for info in manifest["models"].values():
        src = Path(str(info.get("source", "")))
        if src.is_absolute() and src.resolve().is_relative_to(ROOT):
            info["source"] = rel(src)
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def build_traces(processes: int | None) -> None:
    for task in TASKS:
        for split in SPLITS:
            out = traces_dir(task) / f"{split}.jsonl.gz"
            if out.exists():
                print(f"kept {rel(out)}", flush=True)
                continue
            more = ["--processes", str(processes)] if processes else []
            as2d("traces", "build", "--models", rel(pair_dir()), "--task", task,
                 "--split", split, "-q", *more)  # fmt: skip


def write_profile() -> None:
    """The pair's K70 profile, unless the one there already prices this very pair."""
    import yaml

    from as2d_cli.models.model_pair import load_pair

    if profile_path().exists():
        doc = yaml.safe_load(profile_path().read_text(encoding="utf-8")) or {}
        recorded = ((doc.get("device") or {}).get("pair") or {}).get("sha256")
        if recorded == load_pair(pair_dir(), check_hashes=False).identity()["sha256"]:
            print(f"kept {rel(profile_path())}", flush=True)
            return
    cmd = [sys.executable, str(ROOT / "training" / "make_k70_profile.py"), "--pair"]
    subprocess.run([*cmd, rel(pair_dir())], cwd=ROOT, check=True)


def selected_on(dep: Path, files: list[Path]) -> bool:
    """The deployment was chosen on the current profile and these trace files."""
    import yaml

    doc = yaml.safe_load(dep.read_text(encoding="utf-8")) or {}
    used = {t.get("sha256") for t in (doc.get("selection") or {}).get("traces") or []}
    have = {sha256_file(f) for f in files}
    return (doc.get("profile") or {}).get("sha256") == sha256_file(profile_path()) and used <= have


def select(processes: int | None) -> None:
    for task in TASKS:
        dep = deployment_path(task)
        files = [traces_dir(task) / f"{s}.jsonl.gz" for s in ("dev", "val")]
        if dep.exists():
            if selected_on(dep, files):
                print(f"kept {rel(dep)}", flush=True)
                continue
            raise SystemExit(
                f"{rel(dep)} was chosen on another profile or other traces; run with --replace"
            )
        dep.parent.mkdir(parents=True, exist_ok=True)
        args = ["select-budget", "--profile", rel(profile_path())]
        for f in files:
            args += ["--traces", rel(f)]
        args += ["--threshold", THRESHOLDS, "--batch", BATCHES, "--out", rel(dep), "-q"]
        if processes:
            args += ["--processes", str(processes)]
        as2d(*args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exports", type=Path, default=EXPORTS, help="holds target/ and drafter/")
    ap.add_argument("--target-variant", default="quantized", help="the target's file variant")
    ap.add_argument("--drafter-variant", default="quantized", help="the drafter's file variant")
    ap.add_argument("--replace", action="store_true", help="ship over a shipped pair")
    ap.add_argument("--processes", type=int, default=None, help="trace and selection workers")
    a = ap.parse_args()
    exports = a.exports.resolve()
    for role in ("target", "drafter"):
        if not (exports / role / "config.json").is_file():
            raise SystemExit(f"{exports / role}: no export (run training/alm_export.py first)")
    if pair_dir().exists() and not a.replace and not same_exports(exports):
        raise SystemExit(
            f"{rel(pair_dir())} holds another export than {exports}; pass --replace to ship these"
        )
    shipped = [pair_dir(), profile_path(), *(deployment_path(t) for t in TASKS)]
    if a.replace and any(p.exists() for p in shipped):
        move_away()
    if not pair_dir().exists():
        import_pair(exports, a.target_variant, a.drafter_variant)
    build_traces(a.processes)
    write_profile()
    select(a.processes)
    check = ALM / "ship-check"
    check.mkdir(parents=True, exist_ok=True)
    as2d("eval", "--phone", "k70", "--models", NAME, "--task", "all", "--results", rel(check))


if __name__ == "__main__":
    main()
