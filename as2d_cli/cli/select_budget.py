"""`as2d select-budget`: pick one fixed source/budget on dev traces, confirm it on val,
write it as a deployment file (files only, no device needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console


def _budgets(text: str) -> list[int]:
    from as2d_cli.errors import UserError

    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise UserError(f"--budgets {text!r}: expected integers and ranges like 1-24 or 1-8,12") from None
    if not out or min(out) < 1:
        raise UserError(f"--budgets {text!r}: give budgets >= 1, like 1-24")
    return out


def register(app: typer.Typer) -> None:
    @app.command("select-budget")
    def select_budget(
        profile: Path = typer.Option(..., "--profile", help="Device cost profile (as2d.profile YAML)."),
        traces: list[Path] = typer.Option(..., "--traces", help="Trace file(s) holding the dev and val windows; repeat to merge files (e.g. a dev and a val file)."),
        sources: Optional[str] = typer.Option(None, "--sources", help="Comma-separated sources to search (default: every trace source the profile has costs for)."),
        budgets: str = typer.Option("1-24", "--budgets", help="Budgets to search, e.g. 1-24 or 1-8,12."),
        tolerance: float = typer.Option(0.01, "--tolerance", help="Validation retention: chosen TPS within this fraction of the val best."),
        processes: Optional[int] = typer.Option(None, "--processes", help="Worker processes (default: usable CPUs)."),
        out: Optional[Path] = typer.Option(None, "--out", help="Deployment file (default: calibrations/<device>/deployment.yaml, or -2, -3… if taken)."),
        as_json: bool = typer.Option(False, "--json", help="Print the machine-readable selection report."),
        threshold: Optional[float] = typer.Option(None, "--threshold", help="As²d's confidence stop for the whole catalog (default: the methods' default)."),
        batch: Optional[int] = typer.Option(None, "--batch", help="The source's publication batch for the whole catalog (default: the methods' default)."),
    ) -> None:
        """Select the fixed As²d configuration (source × budget) by pooled dev TPS."""
        from as2d_cli.engine.methods import DEFAULT_BATCH, DEFAULT_THRESHOLD
        from as2d_cli.formats.common import next_free
        from as2d_cli.formats.profile_io import load_profile
        from as2d_cli.replay.report import default_deployment_path, select_report, write_selection

        srcs = [s.strip() for s in sources.split(",") if s.strip()] if sources else None
        sel, rep = select_report(profile, traces, sources=srcs, budgets=_budgets(budgets), tolerance=tolerance,
                                 processes=processes, threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
                                 batch=DEFAULT_BATCH if batch is None else batch)
        dest = out if out is not None else next_free(default_deployment_path(load_profile(profile)))
        written = write_selection(sel, rep, profile, dest)
        rep["deployment"] = str(written)
        if as_json:
            typer.echo(json.dumps(rep, indent=1, allow_nan=False))
            return
        c = Console(width=110, highlight=False)
        dev = rep["dev"]
        c.print(f"selected {sel.source} / budget {sel.budget} (K ≤ {sel.budget + 1}): {dev['tps']:.2f} TPS pooled over "
                f"{dev['windows']} dev windows ({rep['catalog']['configurations']} configurations)")
        c.print(f"dev oracle {dev['oracle']['tps_oracle']:.2f} TPS, gap {dev['oracle']['gap_percent']:.2f}%")
        v = rep["val"]
        if v is None:
            c.print("no val windows in the traces: retention not checked")
        else:
            verdict = "retained" if v["retained"] else "NOT retained"
            c.print(f"val: {v['tps']:.2f} TPS, rank {v['rank']} (best {v['best']['source']}/budget {v['best']['budget']} "
                    f"{v['best']['tps']:.2f}); {verdict} at tolerance {100 * v['tolerance']:.1f}%")
        for r in rep["ranking"][:5]:
            c.print(f"  {r['source']:>12} budget {r['budget']:>2}: {r['tps']:.3f}")
        c.print(f"wrote {written}")
