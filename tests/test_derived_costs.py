"""A cost neither measured nor published is labelled where it prices a figure: the profile
carries its derivation, and eval states it with the headline's sensitivity to it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from as2d_cli.evaluate.fixed import derived_sensitivity
from as2d_cli.evaluate.inputs import load_trace_files, trace_files
from as2d_cli.evaluate.run import render_provenance
from as2d_cli.formats.deployment_io import load_deployment
from as2d_cli.formats.profile_io import load_profile, write_profile

ASSETS = Path(__file__).resolve().parents[1] / "as2d_cli" / "assets"
K70 = ASSETS / "profiles" / "k70.profile.yaml"


def test_the_k70_lookahead_cost_carries_its_derivation(tmp_path: Path) -> None:
    p = load_profile(K70)
    assert "not measured on a phone" in (p.sources["lookahead"].derived or "")
    assert p.sources["drafter"].derived is None  # the paper's published draft forward
    back = load_profile(write_profile(tmp_path / "k.profile.yaml", p))
    assert back.sources["lookahead"].derived == p.sources["lookahead"].derived


def test_eval_reports_the_headline_at_the_derived_cost_and_around_it() -> None:
    prof = load_profile(K70)
    dep = load_deployment(ASSETS / "profiles" / "k70" / "deployment.yaml", profile=K70)
    ts = load_trace_files(trace_files(ASSETS / "traces"))
    s = derived_sensitivity(ts, prof, dep)
    assert s is not None and s["cost"] == "costs.sources.lookahead.step_ms"
    lo, hi = s["as2d_over_target_only_scaled"]
    # a cheaper source gives more, a dearer one less, around the derived price's figure
    assert lo > s["as2d_over_target_only"] > hi
    prov = {
        "profile": {"path": str(K70), "device": "k70", "synthetic": True},
        "deployment": {
            "path": "d",
            "source": "lookahead",
            "budget": 15,
            "threshold": 0.7,
            "batch": 2,
            "validation_retained": True,
        },
        "traces": ["t"],
        "pair": {"name": "bundled"},
        "sensitivity": s,
    }
    line = render_provenance(prov).splitlines()[-1]
    assert line.startswith("derived     costs.sources.lookahead.step_ms = 29.887 ms is derived")
    assert "at ×0.75" in line and "at ×1.25" in line
    # a measured source: no sensitivity, no line
    measured = dataclasses.replace(
        prof,
        sources={
            **prof.sources,
            "lookahead": dataclasses.replace(prof.sources["lookahead"], derived=None),
        },
    )
    assert derived_sensitivity(ts, measured, dep) is None
