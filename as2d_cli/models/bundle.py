"""Load and check the model bundle (schema ``as2d.models``, documented in docs/models.md).

The bundle is a directory with ``models.json``, the tokenizer, the CTC character table and
the ONNX files. Loading checks that every listed file exists and matches its recorded
SHA-256, and names the first missing or mismatched file in one UserError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats.common import read_json, sha256_file
from as2d_cli.models.whisper_prompt import build_prompt

SCHEMA = "as2d.models"
VERSION = 3  # 3 adds imported pairs (kinds whisper-onnx, ctc-onnx; files outside the folder)
READS = (2, 3)
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "assets" / "models"


class Vocabulary:
    """The BPE tokenizer shared by target and drafter (a `tokenizers` JSON file)."""

    def __init__(self, path: Path, specials: dict[str, int]) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own exception types
            raise FormatError(
                f"tokenizer {path} cannot be read ({exc}); reinstall the package"
            ) from None
        self.sot = int(specials["sot"])
        self.eot = int(specials["eot"])
        self.pad = int(specials["pad"])
        self.size = self._tok.get_vocab_size()
        # A byte-level BPE (Whisper's) marks a word start by a leading space, which the first
        # word of a text lacks; a Metaspace BPE (the bundled one) adds the marker itself.
        probe = self._tok.encode("a", add_special_tokens=False).tokens
        self._lead = "" if probe and probe[0].startswith(("▁", "Ġ")) else " "

    def encode(self, text: str) -> list[int]:
        """Text to token ids as the model would emit them mid-transcript (no special tokens)."""
        text = " ".join(text.split())
        return (
            list(self._tok.encode(self._lead + text, add_special_tokens=False).ids) if text else []
        )

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)


@dataclass(frozen=True)
class ModelBundle:
    """A model pair: the bundled one or an imported one (``as2d models import``).

    ``task`` and ``language`` select a Whisper model's prompt (None: the pair's task, and
    each request's own language)."""

    directory: Path
    manifest: dict
    vocab: Vocabulary = field(repr=False)
    task: str | None = None
    language: str | None = None

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", "bundled"))

    def identity(self) -> dict:
        """Which pair this is, as traces and profiles record it: its name, the task and forced
        language, and one digest over every file hash in its manifest — each file named by its
        model and file name, so the digest does not depend on where the files lie."""
        import hashlib

        hashes = {f"./{Path(k).name}": v for k, v in self.manifest.get("sha256", {}).items()}
        for role, info in self.manifest["models"].items():
            hashes.update({f"{role}/{Path(k).name}": v for k, v in info.get("sha256", {}).items()})
        digest = hashlib.sha256(json.dumps(sorted(hashes.items())).encode()).hexdigest()
        return {
            "name": self.name,
            "task": self.task or "transcribe",
            "language": self.language,
            "sha256": digest,
        }

    def max_length(self) -> int:
        """The target's committed-token limit: decoder positions less its prompt."""
        info = self.model("target")
        if info["kind"] == "whisper-onnx":
            gen = json.loads(self.path(info["files"]["generation"]).read_text(encoding="utf-8"))
            prompt = build_prompt(
                gen, self.task or info.get("task", "transcribe"), self.language, "target"
            )
            return int(info["dims"]["max_tokens"]) - len(prompt)
        return int(info["dims"]["max_tokens"]) - 1

    def has(self, name: str) -> bool:
        return name in self.manifest.get("models", {})

    def has_ahead(self, name: str = "drafter") -> bool:
        """Model ``name`` has a look-ahead decoder file (``files.ahead_decoder``: the
        ``lookahead`` source's)."""
        return self.has(name) and "ahead_decoder" in self.model(name).get("files", {})

    def model(self, name: str) -> dict:
        try:
            return self.manifest["models"][name]
        except KeyError:
            have = ", ".join(sorted(self.manifest.get("models", {}))) or "none"
            raise UserError(
                f"model {name!r} is not in {self.directory / 'models.json'} (it has: {have}); "
                "run training/export.py to add it"
            ) from None

    def path(self, filename: str) -> Path:
        return self.directory / filename

    def ctc_chars(self) -> list[str]:
        info = self.model("ctc")
        return list(json.loads(self.path(info["chars"]).read_text(encoding="utf-8"))["chars"])


def load_bundle(
    directory: Path | str | None = None,
    check_hashes: bool = True,
    *,
    task: str | None = None,
    language: str | None = None,
) -> ModelBundle:
    """Read models.json in ``directory`` (default: the bundled models) and check its files."""
    directory = Path(directory) if directory is not None else DEFAULT_DIR
    path = directory / "models.json"
    manifest = read_json(
        path,
        f"model manifest {path} not found; reinstall the package, run training/export.py "
        "or, for your own pair, `as2d models import`",
        "rerun training/export.py",
        FormatError,
    )
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise FormatError(
            f"{path}: key 'schema' must be {SCHEMA!r}; this is not an as2d model manifest"
        )
    version = manifest.get("version")
    if version not in READS:
        hint = (
            "upgrade as2d"
            if isinstance(version, int) and version > VERSION
            else "rerun training/export.py"
        )
        raise FormatError(
            f"{path}: model manifest version {version!r} is not supported (this as2d reads {VERSION}); {hint}"
        )
    for key in ("tokenizer", "specials", "models", "sha256"):
        if key not in manifest:
            raise FormatError(f"{path}: key {key!r} is missing; rerun training/export.py")
    fix = (
        "re-import the pair with `as2d models import`"
        if manifest.get("imported")
        else "reinstall the package or rerun training/export.py"
    )
    hashes = dict(manifest["sha256"])
    for name, info in manifest["models"].items():
        for key in ("kind", "dims", "files", "sha256"):
            if key not in info:
                raise FormatError(f"{path}: models.{name} has no {key!r}; rerun training/export.py")
        hashes.update(info["sha256"])
    for filename, digest in sorted(hashes.items()):
        f = directory / filename
        if not f.is_file():
            raise UserError(f"model file {f} is missing (listed in {path}); {fix}")
        if check_hashes and sha256_file(f) != digest:
            raise UserError(
                f"model file {f} does not match its SHA-256 in {path}; it was changed or truncated: {fix}"
            )
    vocab = Vocabulary(directory / manifest["tokenizer"], manifest["specials"])
    if task is not None and task not in ("transcribe", "translate"):
        raise UserError(f"unknown --task {task!r}; use transcribe or translate")
    if (task is not None or language is not None) and not any(
        m.get("kind") == "whisper-onnx" for m in manifest["models"].values()
    ):
        raise UserError(
            f"--task and --language select a Whisper pair's prompt; the pair in {directory} has no "
            "Whisper model (drop them, or pass --models PAIR)"
        )
    return ModelBundle(directory, manifest, vocab, task, language)


def portable_files(bundle: ModelBundle) -> tuple[list[tuple[str, Path]], dict]:
    """A pair as one self-contained folder (for a phone): (relative name, host file) for
    every file the manifest lists (not ``models.json`` itself), and the manifest rewritten so files referenced outside
    the folder sit at ``<model>/<file name>`` (external weight files keep their names, next
    to the ONNX file that loads them)."""
    import copy

    manifest = copy.deepcopy(bundle.manifest)
    out: dict[str, Path] = {}

    def place(key: str, role: str) -> str:
        rel = key if not Path(key).is_absolute() else f"{role}/{Path(key).name}"
        out[rel] = bundle.directory / key
        return rel

    manifest["sha256"] = {place(k, "."): v for k, v in manifest["sha256"].items()}
    out[manifest["tokenizer"]] = bundle.directory / manifest["tokenizer"]
    for role, info in manifest["models"].items():
        info["sha256"] = {place(k, role): v for k, v in info["sha256"].items()}
        info["files"] = {
            k: (f"{role}/{Path(v).name}" if Path(v).is_absolute() else v)
            for k, v in info["files"].items()
        }
        if "external_data" in info:
            info["external_data"] = [
                f"{role}/{Path(v).name}" if Path(v).is_absolute() else v
                for v in info["external_data"]
            ]
        for key in ("chars",):  # unhashed side files of the bundled models
            if key in info:
                out[info[key]] = bundle.directory / info[key]
    return sorted(out.items()), manifest
