"""Model pairs that ship inside the package, named on the command line by their name.

``--models audio-llm`` names the trained audio-LLM pair shipped in
``as2d_cli/assets/pairs/audio-llm/`` (made by ``training/alm_ship.py``; docs/models.md, "The
shipped audio-LLM pair"). Every command resolves ``--models`` here, once, while its command
line is parsed: a path that exists is that folder; a name of a shipped pair is its folder;
anything else that is not a path is one line naming the shipped pairs.

A shipped pair's folder is an ordinary imported pair (``models.json`` with copied files)
with its traces beside it (``traces/``, ``traces/<task>/``); its K70 profile is a shipped
profile of its own (``as2d_cli/assets/profiles/k70.<name>.profile.yaml``) with the
deployments chosen on it beside the K70 ones (``as2d_cli/assets/profiles/k70/``).
"""

from __future__ import annotations

from pathlib import Path

from as2d_cli.errors import UserError

SHIPPED_PAIRS = Path(__file__).resolve().parents[1] / "assets" / "pairs"
# The pairs this version of as2d ships (their folders may be absent from a checkout whose
# weights are not committed yet: a name of this list then says how to make it).
SHIPPED_NAMES: tuple[str, ...] = ("audio-llm",)


def shipped_pairs(root: Path = SHIPPED_PAIRS) -> dict[str, Path]:
    """Name → folder of every shipped pair present (a folder of ``root`` with models.json)."""
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / "models.json").is_file()}


def shipped_pair(name: str, root: Path = SHIPPED_PAIRS) -> Path | None:
    """The folder of the shipped pair ``name``, or None when it is not installed."""
    return shipped_pairs(root).get(name)


def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or value.startswith(".") or value.startswith("~")


def resolve_models(value: str | Path, root: Path = SHIPPED_PAIRS) -> Path:
    """``--models VALUE`` as a pair folder: an existing path as given, else the shipped pair
    of that name; a path that does not exist is returned as it is (the pair loader says
    what is wrong with it); an unknown name is refused in one line naming the shipped pairs."""
    text = str(value)
    path = Path(text).expanduser()
    if path.exists() or _looks_like_path(text):
        return path
    found = shipped_pair(text, root)
    if found is not None:
        return found
    present = shipped_pairs(root)
    if text in SHIPPED_NAMES:
        raise UserError(
            f"--models {text}: the shipped pair {text!r} is not in this installation "
            f"({root / text} is missing); reinstall as2d, or make it with "
            "`python training/alm_ship.py`"
        )
    names = ", ".join(
        n if n in present else f"{n} (not installed)"
        for n in dict.fromkeys([*present, *SHIPPED_NAMES])
    )
    raise UserError(
        f"--models {text}: no such folder and no shipped model pair of that name (shipped: "
        f"{names}); pass a pair folder made by `as2d models import`, or a shipped name"
    )


__all__ = ["SHIPPED_NAMES", "SHIPPED_PAIRS", "resolve_models", "shipped_pair", "shipped_pairs"]
