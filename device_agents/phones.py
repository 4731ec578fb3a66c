"""The one table of phones the toolkit knows by name: the paper's four (Table 6,
docs/phones.md). ``--phone``, the emulated phone's profiles, profile and result folder
names all use these names; the aliases are accepted on input only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownPhone:
    name: str
    marketing_name: str
    model_id: str  # ro.product.model
    aliases: tuple[str, ...] = ()


KNOWN_PHONES: dict[str, KnownPhone] = {
    p.name: p
    for p in (
        KnownPhone("k70", "Redmi K70 Pro", "23117RK66C", ("redmi-k70-pro",)),
        KnownPhone("mi14", "Xiaomi 14", "23127PN0CC", ("14",)),
        KnownPhone("mi11pro", "Xiaomi 11 Pro", "M2102K1AC", ("11pro",)),
        KnownPhone("note9pro", "Redmi Note 9 Pro 5G", "M2007J17C", ()),
    )
}
_BY_ALIAS = {a: p.name for p in KNOWN_PHONES.values() for a in p.aliases}
_BY_MODEL = {p.model_id: p.name for p in KNOWN_PHONES.values()}


def canonical(name: str) -> str | None:
    """The table's name for ``name`` (a name or an alias), None when it is no known phone."""
    name = name.lower()
    return name if name in KNOWN_PHONES else _BY_ALIAS.get(name)


def by_model(model_id: str | None) -> KnownPhone | None:
    """The known phone whose ro.product.model is ``model_id``."""
    key = _BY_MODEL.get(model_id or "")
    return KNOWN_PHONES[key] if key else None


def known_names() -> str:
    return ", ".join(["local", *KNOWN_PHONES])


def _squash(text: str) -> str:
    """Case, spaces, dashes and underscores do not tell phone names apart."""
    return "".join(c for c in text.lower() if c.isalnum())


def near_miss(name: str) -> str | None:
    """The known name ``name`` was most likely meant to be (``k7O``, ``k-70``, ``Redmi K70
    Pro`` → k70; ``locl`` → local), or None. Only for messages: a near miss is never
    resolved silently (it may be a serial)."""
    import difflib

    spellings = {"local": "local"}
    for p in KNOWN_PHONES.values():
        for s in (p.name, *p.aliases, p.marketing_name, p.model_id):
            spellings[_squash(s)] = p.name
    key = _squash(name)
    if key in spellings:
        return spellings[key]
    starts = {v for k, v in spellings.items() if len(key) >= 3 and k.startswith(key)}
    if len(starts) == 1:  # a name cut short: mi11 → mi11pro
        return starts.pop()
    # O and 0, l and 1 look alike on a keyboard row and in a font.
    near = difflib.get_close_matches(key, list(spellings), n=1, cutoff=0.6)
    if not near:
        near = difflib.get_close_matches(
            key.replace("o", "0").replace("l", "1"),
            [k.replace("o", "0").replace("l", "1") for k in spellings],
            n=1,
            cutoff=0.75,
        )
        if near:
            near = [k for k in spellings if k.replace("o", "0").replace("l", "1") == near[0]]
    return spellings[near[0]] if near else None


def did_you_mean(name: str) -> str:
    """`` (did you mean k70?)`` for a near miss of a known name, else empty: the tail of an
    unknown ``--phone`` message."""
    near = near_miss(name)
    return f" (did you mean {near}?)" if near is not None and near != name else ""
