"""Every versioned document the toolkit stores or prints, in one table (docs/formats.md,
"Every stored file"): its schema name, the version it writes, the versions it reads, the
module that owns its ``SCHEMA``/``VERSION`` (and reads and writes it), its JSON Schema
under ``as2d_cli/formats/schemas/`` if it has one, and the docs section that describes it.

An owning module takes its constants from here, under the names it always had::

    SCHEMA, VERSION = registry.name_version("as2d.stream")

so a schema's name and version are written once. Every document keeps its version under
the key ``version`` (energy results read their old ``schema_version``, energy/results.py).
A module's version history stays in a comment beside its constants.

Not in the table: the runner protocol's messages (``as2d.runner``, native/protocol.py) — a
wire format between the host and a runner, versioned and documented on its own
(docs/runner-protocol.md, "Versions"), never stored — and files that name no schema of
their own (a run folder's ``gate.json``, ``monitor.json``, ``plan.json``, a profile's
``.samples.jsonl``…), described with the command that writes them.

This module imports nothing of the project: any layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stored:
    """One versioned document."""

    schema: str  # the value of its "schema" key (a header line's first word for episode.tsv)
    version: int  # the version this toolkit writes
    reads: tuple[int, ...]  # the versions it reads (older ones upgraded on load)
    file: str  # what it is called, its encoding
    owner: str  # the file (from the repository root) that declares SCHEMA and VERSION
    doc: str  # "docs/<page>.md#<a heading's words>": the section that documents it
    json_schema: str | None = None  # its JSON Schema in as2d_cli/formats/schemas/
    parts: tuple[str, ...] = ()  # JSON Schemas of its parts (no schema/version of their own)
    printed: bool = False  # printed by a command's --json rather than stored

    @property
    def doc_page(self) -> str:
        return self.doc.partition("#")[0]

    @property
    def doc_section(self) -> str:
        return self.doc.partition("#")[2]


FORMATS: tuple[Stored, ...] = (
    Stored(
        "as2d.trace",
        2,
        (1, 2),
        "traces, `*.jsonl` or `*.jsonl.gz` (JSON Lines)",
        "as2d_cli/formats/trace.py",
        "docs/formats.md#`as2d.trace`",
        "trace.schema.json",
        parts=("trace-window.schema.json",),
    ),
    Stored(
        "as2d.profile",
        3,
        (1, 2, 3),
        "a cost profile, `*.profile.yaml`",
        "as2d_cli/formats/profile.py",
        "docs/formats.md#`as2d.profile`",
        "profile.schema.json",
    ),
    Stored(
        "as2d.deployment",
        3,
        (1, 2, 3),
        "a deployment, `deployment.yaml`",
        "as2d_cli/formats/deployment.py",
        "docs/formats.md#`as2d.deployment`",
        "deployment.schema.json",
    ),
    Stored(
        "as2d.results",
        1,
        (1,),
        "results, `results.json`",
        "as2d_cli/formats/results.py",
        "docs/formats.md#`as2d.results`",
        "results.schema.json",
    ),
    Stored(
        "as2d.manifest",
        1,
        (1,),
        "a results folder's `manifest.json`",
        "as2d_cli/formats/common.py",
        "docs/formats.md#`as2d.manifest`",
    ),
    Stored(
        "as2d.per_window",
        3,
        (1, 2, 3),
        "the tidy table, `per_window.csv` and `.parquet`",
        "as2d_cli/evaluate/tables.py",
        "docs/formats.md#Tidy tables",
    ),
    Stored(
        "as2d.report",
        1,
        (1,),
        "a report over several runs, `report.json`",
        "as2d_cli/evaluate/report.py",
        "docs/formats.md#`as2d.report`",
    ),
    Stored(
        "as2d.stream",
        2,
        (1, 2),
        "a stream, `stream.json`",
        "as2d_cli/stream/results.py",
        "docs/formats.md#`as2d.stream`",
    ),
    Stored(
        "as2d.native-run",
        1,
        (1,),
        "what a native run measures, `native.settings.json`",
        "as2d_cli/evaluate/native_runs.py",
        "docs/evaluation.md#`as2d eval --phone P --native`",
    ),
    Stored(
        "as2d.corpus",
        2,
        (1, 2),
        "a corpus manifest, `manifest.json`",
        "as2d_cli/corpus/manifest.py",
        "docs/corpus.md#The bundled speech corpus",
    ),
    Stored(
        "as2d.models",
        3,
        (2, 3),
        "a model pair's `models.json`",
        "as2d_cli/models/model_pair.py",
        "docs/models.md#Bring your own pair",
    ),
    Stored(
        "as2d.energy-result",
        6,
        (1, 2, 3, 4, 5, 6),
        "an energy run's `energy.json`",
        "as2d_cli/energy/results.py",
        "docs/energy.md#Files",
        "energy-result.schema.json",
    ),
    Stored(
        "as2d.energy-episode",
        1,
        (1,),
        "an energy run's `episode.tsv` (schema and version in its first line)",
        "as2d_cli/energy/episode_records.py",
        "docs/energy.md#Files",
    ),
    Stored(
        "as2d.energy-phone-run",
        1,
        (1,),
        "an energy run's `phone_run.json`",
        "as2d_cli/energy/phone_run.py",
        "docs/energy.md#Files",
    ),
    Stored(
        "as2d.bundle-manifest",
        1,
        (1,),
        "a runtime bundle's `manifest.json`",
        "as2d_cli/bundle/manifest.py",
        "docs/phones.md#The manifest",
        "bundle-manifest.schema.json",
    ),
    Stored(
        "as2d.payload",
        1,
        (1,),
        "a runner payload part's `payload.json`",
        "as2d_cli/launch/payload.py",
        "docs/runner-protocol.md#Running on a device",
    ),
    Stored(
        "as2d.runner-vectors",
        1,
        (1,),
        "the runner conformance vectors, `tests/data/runner/vectors.jsonl`",
        "training/record_runner_vectors.py",
        "docs/runner-protocol.md#Conformance",
    ),
    Stored(
        "as2d.distill",
        1,
        (1,),
        "a training shard's target transcripts, `target_tokens.json`",
        "training/distill.py",
        "training/README.md#Training",
    ),
    Stored(
        "as2d.replay-report",
        2,
        (2,),
        "`as2d replay --json`",
        "as2d_cli/replay/report.py",
        "docs/replay.md#Report",
        printed=True,
    ),
    Stored(
        "as2d.selection-report",
        3,
        (3,),
        "`as2d select-budget --json`",
        "as2d_cli/replay/report.py",
        "docs/replay.md#Report",
        printed=True,
    ),
    Stored(
        "as2d.devices",
        1,
        (1,),
        "`as2d devices --json`",
        "as2d_cli/cli/devices.py",
        "docs/devices.md#Attaching a real phone",
        "devices.schema.json",
        printed=True,
    ),
    Stored(
        "as2d.farm",
        1,
        (1,),
        "`as2d devices --ray ADDRESS --json`",
        "as2d_cli/cli/devices.py",
        "docs/scale-out.md#A cluster across hosts",
        printed=True,
    ),
)

BY_NAME: dict[str, Stored] = {f.schema: f for f in FORMATS}


def entry(schema: str) -> Stored:
    """The registry's entry for ``schema`` (a KeyError names the known ones)."""
    try:
        return BY_NAME[schema]
    except KeyError:
        known = ", ".join(BY_NAME)
        raise KeyError(f"{schema!r} is not in as2d_cli/formats/registry.py ({known})") from None


def name_version(schema: str) -> tuple[str, int]:
    """``(SCHEMA, VERSION)`` of ``schema``: what its owning module declares."""
    e = entry(schema)
    return e.schema, e.version


def markdown_table() -> str:
    """The table docs/formats.md shows ("Every stored file"), one row per document."""

    def versions(e: Stored) -> str:
        older = [str(v) for v in e.reads if v != e.version]
        return ", ".join(older) if older else "—"

    def doc(e: Stored) -> str:
        return f"{e.doc_page}, “{e.doc_section.strip('`')}”" if e.doc_section else e.doc_page

    rows = [
        "| schema | version | also reads | what | owner | JSON Schema | documented in |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in FORMATS:
        what = e.file + (" (printed)" if e.printed else "")
        schema = f"`{e.json_schema}`" if e.json_schema else "—"
        rows.append(
            f"| `{e.schema}` | {e.version} | {versions(e)} | {what} | `{e.owner}` | {schema} "
            f"| {doc(e)} |"
        )
    return "\n".join(rows) + "\n"
