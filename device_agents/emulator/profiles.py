"""Public facts of the paper's four phones (Table 6 and docs/phones.md), as the
emulated phone presents them: getprop values, CPU clusters, GPU, RAM."""

from __future__ import annotations

from dataclasses import dataclass, field

from device_agents.phones import KNOWN_PHONES, canonical


@dataclass(frozen=True)
class Cluster:
    cpus: tuple[int, ...]
    max_khz: int
    min_khz: int = 300000


@dataclass(frozen=True)
class PhoneProfile:
    name: str
    marketing_name: str
    model_id: str
    device: str
    brand: str
    soc_model: str
    platform: str
    android: str
    api: int
    build: str
    security_patch: str
    gpu_model: str
    ram_gib: float
    clusters: tuple[Cluster, ...]
    extra_props: dict[str, str] = field(default_factory=dict)

    @property
    def n_cpus(self) -> int:
        return sum(len(c.cpus) for c in self.clusters)

    @property
    def mem_total_kb(self) -> int:
        return round(self.ram_gib * 1024 * 1024)

    def props(self, serial: str) -> dict[str, str]:
        p = {
            "ro.product.model": self.model_id,
            "ro.product.brand": self.brand,
            "ro.product.manufacturer": "Xiaomi",
            "ro.product.name": self.device,
            "ro.product.device": self.device,
            "ro.product.marketname": self.marketing_name,
            "ro.product.cpu.abi": "arm64-v8a",
            "ro.soc.manufacturer": "QTI",
            "ro.soc.model": self.soc_model,
            "ro.board.platform": self.platform,
            "ro.hardware": "qcom",
            "ro.build.version.release": self.android,
            "ro.build.version.sdk": str(self.api),
            "ro.build.version.incremental": self.build,
            "ro.build.display.id": self.build,
            "ro.build.version.security_patch": self.security_patch,
            "ro.serialno": serial,
            "ro.debuggable": "0",
            "ro.secure": "1",
            "sys.boot_completed": "1",
        }
        p.update(self.extra_props)
        return p


_SD8G3 = (
    Cluster((0, 1), 2265600),
    Cluster((2, 3, 4), 3148800),
    Cluster((5, 6), 2956800),
    Cluster((7,), 3302400),
)

PROFILES: dict[str, PhoneProfile] = {
    "k70": PhoneProfile(
        name="k70",
        marketing_name="Redmi K70 Pro",
        model_id="23117RK66C",
        device="manet",
        brand="Redmi",
        soc_model="SM8650",
        platform="pineapple",
        android="16",
        api=36,
        build="OS3.0.304.0.WNMCNXM",
        security_patch="2026-06-01",
        gpu_model="Adreno750v2",
        ram_gib=10.91,
        clusters=_SD8G3,
    ),
    "mi14": PhoneProfile(
        name="mi14",
        marketing_name="Xiaomi 14",
        model_id="23127PN0CC",
        device="houji",
        brand="Xiaomi",
        soc_model="SM8650",
        platform="pineapple",
        android="16",
        api=36,
        build="OS3.0.306.0.WNCCNXM",
        security_patch="2026-08-01",
        gpu_model="Adreno750v2",
        ram_gib=14.81,
        clusters=_SD8G3,
    ),
    "mi11pro": PhoneProfile(
        name="mi11pro",
        marketing_name="Xiaomi 11 Pro",
        model_id="M2102K1AC",
        device="mars",
        brand="Xiaomi",
        soc_model="SM8350",
        platform="lahaina",
        android="14",
        api=34,
        build="OS2.0.7.0.UKACNXM",
        security_patch="2025-04-01",
        gpu_model="Adreno660v2",
        ram_gib=7.05,
        clusters=(
            Cluster((0, 1, 2, 3), 1804800),
            Cluster((4, 5, 6), 2419200),
            Cluster((7,), 2841600),
        ),
    ),
    "note9pro": PhoneProfile(
        name="note9pro",
        marketing_name="Redmi Note 9 Pro 5G",
        model_id="M2007J17C",
        device="gauguinpro",
        brand="Redmi",
        soc_model="SM7225",
        platform="lito",
        android="12",
        api=31,
        build="V14.0.2.0.SJSCNXM",
        security_patch="2023-03-01",
        gpu_model="Adreno619v2",
        ram_gib=7.21,
        clusters=(Cluster((0, 1, 2, 3, 4, 5), 1804800), Cluster((6, 7), 2208000)),
    ),
}


def profile_named(name: str) -> PhoneProfile | None:
    """The profile of a phone named as in device_agents.phones (names and aliases)."""
    key = canonical(name)
    return PROFILES.get(key) if key else None


# One phone table: the emulated phones carry the table's names and model ids.
assert all(
    canonical(k) == k and KNOWN_PHONES[k].model_id == p.model_id for k, p in PROFILES.items()
)
