"""CPU placement: clusters discovered from the emulated phones' sysfs, the default
verifier/producer split, option overrides and their refusals, and a runner that cannot pin
saying so in one line."""

from __future__ import annotations

import pytest

from as2d_cli.errors import UserError
from as2d_cli.launch.host import LocalRunner, RunnerError
from device_agents.affinity import Cluster, clusters, placement
from device_agents.local import LocalHost


@pytest.mark.parametrize(
    "profile, verifier, producer",
    [
        ("k70", [7], [2, 3, 4]),  # SD 8 Gen 3: 3.30 GHz prime, then the 3.15 GHz cluster
        ("mi11pro", [7], [4, 5, 6]),
        ("note9pro", [6, 7], [0, 1, 2, 3, 4, 5]),
    ],
)
def test_phone_default_is_fastest_cluster_verifying_next_one_drafting(
    make_emulated_phone, profile, verifier, producer
) -> None:
    dev = make_emulated_phone(profile=profile).device()
    p = placement(dev)
    assert (p.verifier, p.producer, p.how) == (verifier, producer, "clusters")
    assert p.clusters[0] == Cluster(tuple(verifier), max(c.max_khz or 0 for c in p.clusters))
    assert sorted(c for cl in clusters(dev) for c in cl.cpus) == list(range(8))
    assert p.to_dict()["clusters"][0]["cpus"] == verifier


def test_options_override_and_bad_values_are_one_line(emulated_phone) -> None:
    dev = emulated_phone.device()
    p = placement(dev, verifier="7", producer="4-6")
    assert (p.verifier, p.producer, p.how) == ([7], [4, 5, 6], "option")
    assert p.describe() == "verifier on CPU7, producer on CPU4,5,6 (option)"
    assert placement(dev, os_placement=True).cores == (None, None)
    for kw, says in [
        ({"producer": "4-9"}, "has CPUs 0-7"),
        ({"verifier": "x"}, "not a CPU list"),
        ({"verifier": "4", "producer": "4-7"}, "share cores"),
        ({"verifier": "7", "os_placement": True}, "drop --verifier-cores"),
    ]:
        with pytest.raises(UserError, match=says) as err:
            placement(dev, **kw)
        assert "\n" not in str(err.value)


def test_local_host_default_and_a_refused_pin() -> None:
    import os

    p = placement(LocalHost())
    cpus = sorted(os.sched_getaffinity(0))
    assert p.how == "local" and (
        p.cores == ([cpus[0]], [cpus[1]]) if len(cpus) > 1 else p.cores == (None, None)
    )
    r = LocalRunner()
    try:
        r.call({"op": "hello"})
        with pytest.raises(
            RunnerError,
            match=r"pinning failed on this device \(verifier on CPU4095: "
            r"sched_setaffinity: .*\); rerun with --os-placement",
        ) as err:
            r.call({"op": "load", "target_cores": [4095]})
        assert "\n" not in str(err.value)
    finally:
        r.close()
