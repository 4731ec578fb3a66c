"""YAML and JSON readers that refuse a mapping with a repeated key.

PyYAML and :func:`json.loads` both keep the *last* value of a key written twice, silently:
a hand-edited profile with two ``loop_ms`` lines, or a deployment with two ``budget``
lines, would load with whichever came last. Every reader of a file the user supplies
(profiles, deployments, traces, candidate batches) goes through these instead, and a
repeated key is one :class:`~as2d_cli.errors.FormatError` line naming the file, the line
(YAML) and the key.

Both parse exactly what :func:`yaml.safe_load` and :func:`json.loads` parse otherwise
(YAML merge keys ``<<`` included: a merged key that the mapping overrides is not a
repeat).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from as2d_cli.errors import FormatError

__all__ = ["DuplicateKey", "json_loads", "yaml_load"]


class DuplicateKey(FormatError):
    """A mapping in the file holds one key twice."""


@lru_cache(maxsize=1)
def _unique_key_loader() -> Any:
    """SafeLoader whose mappings refuse a key written twice. Built on first use: PyYAML is
    a host dependency, and the runner on a phone (which reads JSON only) has none."""
    import yaml
    from yaml.nodes import MappingNode, Node

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
            if isinstance(node, MappingNode):
                # Only keys written in this mapping itself are compared: a key a merge (<<)
                # brings in may be overridden here, which is what merging is for. The base
                # class expands the merges afterwards.
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the base class reports it
                        break
                    line = key_node.start_mark.line + 1
                    if first is not None:
                        raise _Repeat(key, first, line)
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]

    return UniqueKeyLoader


class _Repeat(Exception):
    def __init__(self, key: Any, first: int, again: int) -> None:
        super().__init__(key, first, again)
        self.key, self.first, self.again = key, first, again


def yaml_load(text: str, where: str, what: str = "file") -> Any:
    """``text`` parsed as YAML (safe types only); a key repeated within one mapping, or text
    that is not YAML, is one FormatError naming ``where`` and the line."""
    import yaml
    from yaml.constructor import ConstructorError

    try:
        return yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except _Repeat as r:
        raise DuplicateKey(
            f"{where}: line {r.again}: key {r.key!r} is written twice (first at line {r.first}); "
            f"YAML would silently keep the later value — delete the line you did not mean"
        ) from None
    except (yaml.YAMLError, ConstructorError) as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise FormatError(
            f"{where}: not valid YAML{at} ({problem}); the {what} is truncated or damaged — fix or regenerate it"
        ) from None


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Repeat(k, 0, 0)
            seen.add(k)
    return out


def json_loads(text: str, where: str) -> Any:
    """``text`` parsed as JSON; an object holding one key twice is a FormatError naming
    ``where`` and the key. Other parse errors propagate as :class:`json.JSONDecodeError`
    (callers word those themselves: a line of a JSON Lines file, a whole document)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _Repeat as r:
        raise DuplicateKey(
            f"{where}: key {r.key!r} is written twice in one object; JSON readers would "
            f"silently keep the later value — delete the one you did not mean"
        ) from None
