"""The Table-15-style table of an energy run (Markdown and CSV): one row per formal request,
each method's pooled row, and the notes under it (the baseline, what each energy window
includes, the cross-check, the gauge, the bounds, what failed)."""

from __future__ import annotations

import csv
import io
from typing import Any

from as2d_cli.energy.analysis import SHORT_WINDOW_PERIODS, EnergyAnalysis, MethodSummary


def _window_readings(analysis: EnergyAnalysis) -> str:
    n = [
        r.gauge_readings_in_window
        for r in analysis.requests
        if r.phase == "formal" and r.gauge_readings_in_window is not None
    ]
    if not n:
        return ""
    span = f"{min(n)}" if min(n) == max(n) else f"{min(n)}–{max(n)}"
    return f"; formal request windows got {span} new reading(s) each"


NATIVE_WINDOW = (
    "the window runs from the request origin to the end of both workers: the whole prefill "
    "(audio encoding and prompt), decoding and any producer drain (the paper's starts after "
    "audio encoding, at the instruction suffix)"
)
OTHER_WINDOW = (
    "the window runs from the request origin to the end of both workers as the request "
    "command stamps them (else the episode's /proc/uptime stamps); what it includes is the "
    "command's"
)


def window_includes(plan: dict[str, Any]) -> dict[str, str]:
    """Per method, what its energy window includes, from the command that ran it: a
    bundle's native request (`native.energy_request`) includes audio encoding and the whole
    prefill."""
    cmds = dict(plan.get("method_cmds") or [])
    out: dict[str, str] = {}
    for m in plan.get("methods") or []:
        cmd = str(cmds.get(m, plan.get("request_cmd", "")))
        out[str(m)] = NATIVE_WINDOW if "native.energy_request" in cmd else OTHER_WINDOW
    return out


def _f(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _energy(e: float | None, bound: float | None) -> str:
    return _f(e, ".1f") if bound is None or e is None else f"{e:.1f} ± {bound:.1f}"


def bound_notes(analysis: EnergyAnalysis) -> list[str]:
    """What the ± on the energies means, and how many windows were short for the gauge."""
    g = analysis.gauge
    if g is None or g.period_s is None:
        return []
    d = g.period_s + analysis.poll_s
    placed = [r for r in analysis.requests if r.energy_from == "readings"]
    polled = [r for r in analysis.requests if r.energy_from == "polls" and r.status == "ok"]
    noise = analysis.noise_percent or 0.0
    out = [
        f"± bound: energy from the gauge's readings placed at their update instants (± "
        f"{analysis.placement_s or 0.0:.3g} s){' on one fixed update grid' if analysis.on_grid else ''}, "
        f"each the power at its instant; off by at most 3 × the reading noise under load "
        f"({noise:.2g} % per reading) carried through the time each reading stands for, plus "
        "that time × the departure of any reading that leaves its neighbours (a transient the "
        "gauge caught), plus the placement × the step at each edge; a method's pooled "
        "energy by the sum of those terms and the noise terms in quadrature (docs/energy.md)"
    ]
    if polled or not placed:
        out.append(
            f"{len(polled)} window(s) held no reading surely inside: their energy is the polled "
            f"curve's, which shows a load step up to {d:.3g} s late (period {g.period_s:.3g} s "
            f"+ poll {analysis.poll_s:.3g} s), bounded by {d:.3g} s × the step between its edges "
            "plus 3 × the noise × √(window × period)"
        )
    for m in analysis.methods:
        if m.energy_bound_percent is not None:
            out.append(f"{m.method}: pooled energy ± {m.energy_bound_percent:.1f} %")
    short = [r for r in analysis.requests if r.phase == "formal" and r.short_window]
    if short:
        out.append(
            f"{len(short)} formal window(s) shorter than {SHORT_WINDOW_PERIODS:g} × the gauge "
            f"period ({SHORT_WINDOW_PERIODS * g.period_s:.3g} s), marked (short): the gauge's "
            "late view of the load is a large share of such a window"
        )
    return out


def short_window_lines(analysis: EnergyAnalysis) -> list[str]:
    """One line per request window shorter than SHORT_WINDOW_PERIODS × the gauge period."""
    g = analysis.gauge
    if g is None or g.period_s is None:
        return []
    out = []
    for r in analysis.requests:
        if r.short_window and r.window_s is not None and r.energy_j:
            bound = r.energy_bound_j or 0.0
            out.append(
                f"request {r.method}/{r.phase} at boot {r.origin_boot_ns / 1e9:.3f} s: its "
                f"window ({r.window_s:.2f} s) is shorter than {SHORT_WINDOW_PERIODS:g} × the "
                f"gauge period ({g.period_s:.3g} s); its energy {r.energy_j:.1f} J may be off "
                f"by ± {bound:.1f} J ({100 * bound / r.energy_j:.0f} %)"
            )
    return out


def _method_rows(analysis: EnergyAnalysis, m: MethodSummary, md: list[str], w: Any) -> None:
    """One method's rows: each formal request (a failed one keeps its row), then its
    pooled row (Markdown lines appended to ``md``, CSV rows written to ``w``)."""
    formal = [r for r in analysis.requests if r.method == m.method and r.phase == "formal"]
    for k, r in enumerate(formal, 1):
        if r.status == "ok":
            md.append(
                f"| {m.method} | {k}{' (short)' if r.short_window else ''} | "
                f"{_energy(r.energy_j, r.energy_bound_j)} | "
                f"{_f(r.mean_power_w, '.2f')} | {_f(r.response_s, '.2f')} | "
                f"{r.body_tokens} | {_f(r.j_per_token, '.3f')} |"
            )
        else:
            word = r.status.split(":", 1)[0]  # failed, stopped or not run
            md.append(f"| {m.method} | {k} | {word} | — | — | — | — |")
        w.writerow(
            [
                m.method,
                k,
                r.status,
                repr(r.energy_j),
                repr(r.mean_power_w),
                repr(r.response_s),
                repr(r.window_s),
                r.body_tokens,
                repr(r.j_per_token),
                repr(r.energy_bound_j),
                "" if r.short_window is None else str(r.short_window).lower(),
            ]
        )
    if m.status != "ok" and not formal:
        md.append(f"| {m.method} | — | {m.status.split(':', 1)[0]} | — | — | — | — |")
    if m.status == "ok" and (m.formal_requests > 1 or not formal):
        label = f"pooled ({m.measured_requests} of {m.formal_requests})"
        md.append(
            f"| {m.method} | {label} | {_energy(m.energy_j, m.energy_bound_j)} | "
            f"{_f(m.mean_power_w, '.2f')} | {_f(m.response_s, '.2f')} | "
            f"{m.body_tokens} | {_f(m.j_per_token, '.3f')} |"
        )
    if m.formal_requests > 1 or not formal or m.status != "ok":
        w.writerow(
            [
                m.method,
                "pooled",
                m.status,
                repr(m.energy_j),
                repr(m.mean_power_w),
                repr(m.response_s),
                "",
                "" if m.body_tokens is None else m.body_tokens,
                repr(m.j_per_token),
                repr(m.energy_bound_j),
                "",
            ]
        )


def _table_notes(analysis: EnergyAnalysis, windows: dict[str, str] | None) -> list[str]:
    """The notes under the table: each method against the baseline, what mean power and
    each energy window mean, the cross-check, the gauge, the bounds, what failed."""
    notes = []
    for m in analysis.methods:
        if m.energy_vs_baseline_percent is not None:
            notes.append(
                f"{m.method} vs {analysis.baseline}: energy "
                f"{m.energy_vs_baseline_percent:+.1f} %, J/token "
                f"{m.j_per_token_vs_baseline_percent:+.1f} %"
            )
    notes.append(
        "mean power = energy / response time (to target EOS), as in the paper; energy "
        "covers the window, which ends when both workers have finished"
    )
    for text in dict.fromkeys((windows or {}).values()):
        which = [m for m, t in (windows or {}).items() if t == text]
        notes.append(f"{', '.join(which)}: {text}")
    c = analysis.cross_check
    if c.discrepancy_percent is not None:
        notes.append(
            f"cross-check over {c.interval_s:.1f} s: current integrates to "
            f"{c.integrated_mah:.2f} mAh vs charge-counter drop "
            f"{c.charge_drop_mah:.2f} mAh ({c.discrepancy_percent:.1f} % discrepancy)"
            + (
                f"; {c.excluded_charging_samples} poll(s) taken while charging left out"
                if c.excluded_charging_samples
                else ""
            )
        )
    else:
        notes.append(f"cross-check: {c.note}")
    if analysis.sign_note:
        notes.append(analysis.sign_note)
    if analysis.gauge is not None:
        notes.append(analysis.gauge.describe(analysis.poll_s) + _window_readings(analysis))
    notes += bound_notes(analysis)
    failed = [r for r in analysis.requests if r.phase == "formal" and r.status != "ok"]
    notes += [
        f"formal request {r.method} failed: {r.status}"
        if r.status.startswith("failed")
        else f"formal request {r.method} {r.status}"
        for r in failed
    ]
    notes += [f"{m.method}: {m.status}" for m in analysis.methods if m.status != "ok"]
    if analysis.trace_lost_bytes:
        notes.append(
            f"trace cut mid-packet: the last {analysis.trace_lost_bytes} of "
            f"{analysis.trace_bytes} bytes were lost; analysed up to the last whole "
            "packet"
        )
    return notes


def render_table(
    analysis: EnergyAnalysis, windows: dict[str, str] | None = None
) -> tuple[str, str]:
    """(Markdown, CSV) of the formal requests, one row each, as the paper's Table 15
    (mean power = energy / response time), and per method with more than one its pooled
    row; a failed request keeps its row, and a method whose requests all failed stays in
    the table with its failure. `windows`: per method, what its energy window includes."""
    head = [
        "Method",
        "Request",
        "Energy (J)",
        "Mean power (W)",
        "Response (s)",
        "Body tokens",
        "J/token",
    ]
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "method",
            "request",
            "status",
            "energy_j",
            "mean_power_w",
            "response_s",
            "window_s",
            "body_tokens",
            "j_per_token",
            "energy_bound_j",
            "short_window",
        ]
    )
    for m in analysis.methods:
        _method_rows(analysis, m, md, w)
    notes = _table_notes(analysis, windows)
    md_text = "\n".join(md) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return md_text, buf.getvalue()
