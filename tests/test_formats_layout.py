"""Every stored name comes from formats/layout.py: the device's safe name and a UTC stamp,
companions beside their profile, and nothing taken is reused."""

from __future__ import annotations

from pathlib import Path

from as2d_cli.formats import layout

AT = 1_764_950_425.0  # 2025-12-05 16:00:25 UTC


def test_names_carry_the_device_and_a_utc_stamp(tmp_path: Path) -> None:
    assert layout.stamp(AT) == "20251205-160025"
    p = layout.profile_path(tmp_path, "Pixel 8/pro", AT)
    assert p == tmp_path / "Pixel_8_pro-20251205-160025.profile.yaml"
    assert layout.companion(p, "samples.jsonl").name == "Pixel_8_pro-20251205-160025.samples.jsonl"
    assert layout.results_stem("k70", "test", AT) == "k70-test-20251205-160025"


def test_nothing_taken_is_reused(tmp_path: Path) -> None:
    first = layout.result_folder(tmp_path, "local", "stream", AT)
    second = layout.result_folder(tmp_path, "local", "stream", AT)
    assert first.is_dir() and second.is_dir() and first != second
    assert second.name == first.name + "-2"
    dep = layout.deployment_path(tmp_path, "k70")
    assert dep == tmp_path / "k70" / "deployment.yaml"
    dep.parent.mkdir(parents=True)
    dep.write_text("x")
    assert layout.deployment_path(tmp_path, "k70").name == "deployment-2.yaml"
    r1, r2 = layout.report_folder(tmp_path, AT), layout.report_folder(tmp_path, AT)
    assert r1.name == "report-20251205-160025" and r2.name == "report-20251205-160025-2"
