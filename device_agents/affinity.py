"""Where the verifier (the target) and the producer (the drafting source) run on a device.

A phone's CPU clusters are discovered from sysfs (``cpufreq/related_cpus`` and
``cpuinfo_max_freq``), never assumed. On a phone the verifier gets the fastest cluster and
the producer the next fastest one, so drafting and verification overlap on different
cores (the paper pins its four drafting workers to cores 4–7); the little cores are left
to the OS. The local host keeps the target on its first allowed CPU and the producer on
the second. ``--verifier-cores`` / ``--producer-cores`` override either side; a device
that refuses explicit placement (the paper's Note 9 Pro) is reported, and measuring under
the OS's own placement happens only when asked (``--os-placement``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from as2d_cli.errors import UserError
from device_agents.base import CPU_DIR, Device, parse_cpu_list


@dataclass(frozen=True)
class Cluster:
    cpus: tuple[int, ...]
    max_khz: int | None


@dataclass(frozen=True)
class Placement:
    verifier: list[int] | None  # None: the OS places it
    producer: list[int] | None
    how: str  # "clusters" (discovered), "local" (this host's default), "option", "os"
    clusters: tuple[Cluster, ...] = ()

    @property
    def cores(self) -> tuple[list[int] | None, list[int] | None]:
        """(target, producer): what the runner's ``load`` command takes."""
        return self.verifier, self.producer

    def to_dict(self) -> dict[str, Any]:
        return {
            "verifier": self.verifier,
            "producer": self.producer,
            "how": self.how,
            "clusters": [{"cpus": list(c.cpus), "max_khz": c.max_khz} for c in self.clusters],
        }

    def describe(self) -> str:
        def side(c: list[int] | None) -> str:
            return "OS placement" if not c else "CPU" + ",".join(map(str, c))

        return f"verifier on {side(self.verifier)}, producer on {side(self.producer)} ({self.how})"


def clusters(device: Device) -> tuple[Cluster, ...]:
    """The device's CPU clusters, fastest first; one cluster of every CPU when the device
    exposes no cpufreq (VMs, containers)."""
    cpus = device.cpus()
    paths = [
        f"{CPU_DIR}/cpu{c}/cpufreq/{f}" for c in cpus for f in ("related_cpus", "cpuinfo_max_freq")
    ]
    files = device.read_files(paths)
    seen: dict[tuple[int, ...], int | None] = {}
    for c in cpus:
        related = files.get(f"{CPU_DIR}/cpu{c}/cpufreq/related_cpus")
        if not related:
            continue
        group = tuple(sorted(parse_cpu_list(related.replace(" ", ","))))
        top = files.get(f"{CPU_DIR}/cpu{c}/cpufreq/cpuinfo_max_freq")
        seen.setdefault(group, int(top) if top and top.strip().isdigit() else None)
    if not seen:
        return (Cluster(tuple(cpus), None),)
    return tuple(
        sorted((Cluster(g, k) for g, k in seen.items()), key=lambda c: (-(c.max_khz or 0), c.cpus))
    )


def local_default() -> tuple[list[int] | None, list[int] | None]:
    """This host: the target on the first allowed CPU, the producer on the second (None when only one)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None, None
    return [cpus[0]], [cpus[1]]


def parse_cores(text: str | None, option: str, n_cpus: int) -> list[int] | None:
    """``--…-cores 4-7`` / ``4,5`` → [4, 5, 6, 7]; checked against the device's CPUs."""
    if text is None:
        return None
    try:
        cores = sorted(set(parse_cpu_list(text)))
    except ValueError:
        raise UserError(f"{option} {text!r} is not a CPU list; write it like 4-7 or 2,3") from None
    bad = [c for c in cores if c >= n_cpus]
    if not cores or bad:
        raise UserError(
            f"{option} {text!r}: the device has CPUs 0-{n_cpus - 1}; pick cores among them"
        )
    return cores


def placement(
    device: Device,
    verifier: str | None = None,
    producer: str | None = None,
    os_placement: bool = False,
) -> Placement:
    """The placement for a measurement on ``device`` (options as typed, None: default)."""
    if os_placement:
        if verifier or producer:
            raise UserError(
                "--os-placement leaves placement to the OS; drop --verifier-cores/--producer-cores"
            )
        return Placement(None, None, "os")
    if device.kind == "local":
        v, p = local_default()
        found: tuple[Cluster, ...] = ()
        how = "local"
    else:
        found = clusters(device)
        if len(found) >= 2:
            v, p, how = list(found[0].cpus), list(found[1].cpus), "clusters"
        else:  # one cluster: split it, the upper half drafting (as the paper's cores 4–7)
            cpus = list(found[0].cpus)
            half = len(cpus) // 2
            v, p, how = (cpus[:half] or None), (cpus[half:] or None), "clusters"
    n = len(device.cpus())
    if verifier is not None or producer is not None:
        v = parse_cores(verifier, "--verifier-cores", n) if verifier is not None else v
        p = parse_cores(producer, "--producer-cores", n) if producer is not None else p
        how = "option"
    if v and p and set(v) & set(p):
        raise UserError(
            f"the verifier (CPU{','.join(map(str, v))}) and the producer (CPU{','.join(map(str, p))}) "
            "share cores; give them separate cores so drafting overlaps verification"
        )
    return Placement(v, p, how, found)
