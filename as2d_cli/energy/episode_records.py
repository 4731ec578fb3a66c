"""The episode records the on-device script writes (`episode.tsv`), read and validated.

Format (tab-separated, one request per row, times on the phone's boot-time clock in ns)::

    # as2d.energy-episode 1
    # key=value             (metadata lines, any number)
    method  phase  origin_boot_ns  target_eos_boot_ns  end_boot_ns  body_tokens  exit_code

`origin` is the request origin, `target_eos` the target's EOS (response time ends there),
`end` the moment both workers have finished (the energy window ends there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from as2d_cli.errors import FormatError
from as2d_cli.formats import registry

SCHEMA, VERSION = registry.name_version("as2d.energy-episode")
COLUMNS = (
    "method",
    "phase",
    "origin_boot_ns",
    "target_eos_boot_ns",
    "end_boot_ns",
    "body_tokens",
    "exit_code",
)
PHASES = ("warmup", "formal")
# Exit codes the host assigns to requests that are not measurements (docs/energy.md):
STOPPED = 252  # it ran when the device's conditions broke (a core went offline)
NOT_RUN = 253  # the episode stopped measuring before it (the conditions broke earlier)
NO_TOKENS = 254  # no AS2D_REQUEST line on stdout
RECORDS_MISSING = 255  # the episode was interrupted before this request finished


@dataclass(frozen=True)
class RequestRecord:
    method: str
    phase: str
    origin_ns: int
    target_eos_ns: int
    end_ns: int
    body_tokens: int
    exit_code: int


@dataclass
class Episode:
    requests: list[RequestRecord]
    meta: dict[str, str] = field(default_factory=dict)


def parse_episode(text: str, source: str = "episode.tsv") -> Episode:
    """Parse and check the records; every problem names the file and line."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise FormatError(
            f"{source}: missing header '# {SCHEMA} {VERSION}'; the episode "
            "script did not start — check episode.log in the run directory"
        )
    head = lines[0][2:].split()
    if len(head) != 2 or head[0] != SCHEMA:
        raise FormatError(f"{source}: header {lines[0]!r} is not '# {SCHEMA} <version>'")
    try:
        version = int(head[1])
    except ValueError:
        raise FormatError(f"{source}: header version {head[1]!r} is not a number") from None
    if version != VERSION:
        word = "newer" if version > VERSION else "older"
        raise FormatError(
            f"{source}: {SCHEMA} version {version} is {word} than this toolkit "
            f"reads ({VERSION}); use the as2d version that pushed the script"
        )
    meta: dict[str, str] = {}
    reqs: list[RequestRecord] = []
    for no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        if line.startswith("#"):
            key, sep, val = line[1:].strip().partition("=")
            if sep:
                meta[key.strip()] = val.strip()
            continue
        cells = line.split("\t")
        if len(cells) != len(COLUMNS):
            raise FormatError(
                f"{source}:{no}: expected {len(COLUMNS)} tab-separated fields "
                f"({', '.join(COLUMNS)}), got {len(cells)}"
            )
        method, phase = cells[0], cells[1]
        if phase not in PHASES:
            raise FormatError(f"{source}:{no}: phase {phase!r} is not one of {PHASES}")
        try:
            origin, eos, end, tokens, rc = (int(c) for c in cells[2:])
        except ValueError:
            raise FormatError(
                f"{source}:{no}: times, tokens and exit code must be integers; got {cells[2:]}"
            ) from None
        if rc == 0 and not origin <= eos <= end:
            raise FormatError(
                f"{source}:{no}: request {method}/{phase} needs origin ≤ target "
                f"EOS ≤ end of both workers, got {origin}, {eos}, {end}"
            )
        reqs.append(RequestRecord(method, phase, origin, eos, end, tokens, rc))
    if not reqs:
        raise FormatError(
            f"{source}: no request rows; the episode ended before its first "
            "request — check episode.log in the run directory"
        )
    return Episode(reqs, meta)


def read_episode(path: Path) -> Episode:
    path = Path(path)
    try:
        return parse_episode(path.read_text(), str(path))
    except OSError as exc:
        raise FormatError(
            f"cannot read {path}: {exc.strerror}; pull the run directory from the phone first"
        ) from exc


def format_episode(episode: Episode) -> str:
    """The text form (the device script writes the same; tests build episodes with it)."""
    out = [f"# {SCHEMA} {VERSION}"]
    out += [f"# {k}={v}" for k, v in episode.meta.items()]
    for r in episode.requests:
        out.append(
            "\t".join(
                str(x)
                for x in (
                    r.method,
                    r.phase,
                    r.origin_ns,
                    r.target_eos_ns,
                    r.end_ns,
                    r.body_tokens,
                    r.exit_code,
                )
            )
        )
    return "\n".join(out) + "\n"
