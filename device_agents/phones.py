"""The one table of phones the toolkit knows by name: the paper's four (Table 6,
shared/phones.md). ``--phone``, the emulated phone's profiles, profile and result folder
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
