"""A model pair's recorded identity (``provenance.pair`` of traces, ``device.pair`` of a
profile): its description in words, whether two name the same pair, and the refusal of
traces and a profile of different pairs."""

from __future__ import annotations

from as2d_cli.errors import UserError
from as2d_cli.formats.profile import CostProfile
from as2d_cli.formats.trace import TraceSet


def describe_pair(pair: dict | None) -> str:
    """A recorded pair identity in words: its name, and for an imported pair its model type
    and task (and the question asked of every window, when one was)."""
    if not pair or pair.get("name") == "bundled":
        return "bundled"
    parts = [str(pair.get("name"))]
    if pair.get("model_type"):
        parts.append(str(pair["model_type"]))
    if pair.get("task"):
        parts.append(
            f"task {pair['task']}"
            + (
                f" into {pair['language']}"
                if pair.get("task") == "translate" and pair.get("language")
                else ""
            )
        )
    if pair.get("question"):
        parts.append(f"question {pair['question']!r}")
    return ", ".join(parts)


def same_pair(a: dict | None, b: dict | None) -> bool:
    """Whether two recorded pair identities name the same pair (None: the bundled pair)."""

    def key(x: dict | None) -> str | None:
        return None if x is None or x.get("name") == "bundled" else x.get("sha256")

    return key(a) == key(b)


def check_pair(
    profile: CostProfile,
    traces: TraceSet,
    where: str,
    pair: dict | None = None,
    pair_given: bool = False,
) -> None:
    """Refuse traces built with one model pair against a profile measured with another
    (or against the pair the command was given), in one line naming both."""
    tp = traces.provenance.get("pair")
    pp = profile.device.get("pair")

    def name(x: dict | None) -> str:
        return (
            "the bundled pair"
            if x is None or x.get("name") == "bundled"
            else f"pair {x.get('name')!r}"
        )

    if pair_given and not same_pair(tp, pair):
        raise UserError(
            f"{where} was built with {name(tp)}, not {name(pair)}; build traces for it with "
            "`as2d traces build --models PAIR`"
        )
    if not same_pair(tp, pp):
        raise UserError(
            f"{where} was built with {name(tp)} but the profile was measured with {name(pp)}; "
            "use traces and a profile of the same model pair"
        )
