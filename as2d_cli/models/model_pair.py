"""Load and check a model pair (schema ``as2d.models``, documented in docs/models.md).

A pair is a directory with ``models.json``, the tokenizer, the CTC character table and
the ONNX files. Loading checks that every listed file exists and matches its recorded
SHA-256, and names the first missing or mismatched file in one UserError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from as2d_cli.errors import FormatError, UserError
from as2d_cli.formats import registry
from as2d_cli.formats.common import read_json, sha256_file
from as2d_cli.models.prompting import WHISPER_TASKS, PromptSpec
from as2d_cli.models.whisper_prompt import build_prompt

SCHEMA, VERSION = registry.name_version("as2d.models")
# 3 adds imported pairs (kinds whisper-onnx, ctc-onnx; files outside the folder)
READS = registry.entry(SCHEMA).reads
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "assets" / "models"


class Vocabulary:
    """A model's BPE tokenizer (a `tokenizers` JSON file): the pair's, shared by target and
    drafter, or a cross-vocabulary drafter's own.

    ``bare_start``: the model's output starts without a leading space (an audio language
    model answers right after its chat template's generation prompt); a transcript of a
    Whisper-style model starts with one."""

    def __init__(self, path: Path, specials: dict[str, int], bare_start: bool = False) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own exception types
            raise FormatError(
                f"tokenizer {path} cannot be read ({exc}); reinstall the package or re-import the pair"
            ) from None
        self.path = path
        self.eot = int(specials["eot"])
        self.sot = int(specials.get("sot", self.eot))
        self.pad = int(specials.get("pad", self.eot))
        self.size = self._tok.get_vocab_size()
        self.bare_start = bare_start
        # A byte-level BPE (Whisper's) marks a word start by a leading space, which the first
        # word of a text lacks; a Metaspace BPE (the bundled one) adds the marker itself.
        probe = self._tok.encode("a", add_special_tokens=False).tokens
        self._lead = "" if probe and probe[0].startswith(("▁", "Ġ")) else " "
        self.unk = self._tok.token_to_id(str(getattr(self._tok.model, "unk_token", "") or ""))

    def encode(self, text: str, start: bool = False) -> list[int]:
        """Text to token ids as the model would emit them mid-output (no special tokens);
        ``start``: at the start of its output (no leading space for a ``bare_start`` model)."""
        text = " ".join(text.split())
        if not text:
            return []
        lead = "" if start and self.bare_start else self._lead
        return list(self._tok.encode(lead + text, add_special_tokens=False).ids)

    def ids(self, text: str) -> list[int]:
        """``text`` tokenized exactly as written, special tokens recognised, none added."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)


@dataclass(frozen=True)
class ModelPair:
    """A model pair: the bundled one or an imported one (``as2d models import``).

    ``prompt`` holds the request settings (task, language, question, instruction text;
    :class:`~as2d_cli.models.prompting.PromptSpec`); None fields take the pair's task and
    each request's own language and question."""

    directory: Path
    manifest: dict
    vocab: Vocabulary = field(repr=False)
    prompt: PromptSpec = PromptSpec()
    _vocabs: dict = field(default_factory=dict, repr=False, compare=False)
    _prompt_hashes: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def task(self) -> str | None:
        return self.prompt.task

    @property
    def language(self) -> str | None:
        return self.prompt.language

    @property
    def name(self) -> str:
        return str(self.manifest.get("name", "bundled"))

    def kind(self, name: str = "target") -> str:
        return str(self.model(name)["kind"])

    def model_type(self, name: str = "target") -> str:
        """The model's architecture: ``dims.model_type`` (audio LLMs), else by its kind."""
        info = self.model(name)
        return str(
            info["dims"].get("model_type")
            or {"whisper-onnx": "whisper"}.get(info["kind"], info["kind"])
        )

    def default_task(self) -> str:
        return str(self.model("target").get("task", "transcribe"))

    def effective_prompt(self) -> PromptSpec:
        """The prompt settings with the pair's default task filled in."""
        from dataclasses import replace

        return self.prompt if self.prompt.task else replace(self.prompt, task=self.default_task())

    def converts(self, name: str) -> bool:
        """Model ``name`` drafts through the text conversion: its tokenizer is not the pair's."""
        return self.has(name) and self.model(name).get("conversion") == "text"

    def vocab_for(self, name: str) -> Vocabulary:
        """Model ``name``'s own tokenizer: the pair's, or a cross-vocabulary drafter's."""
        info = self.model(name)
        if "tokenizer" not in info:
            return self.vocab
        if name not in self._vocabs:
            self._vocabs[name] = Vocabulary(
                self.path(info["tokenizer"]), info["specials"], info["kind"] == "audio-llm-onnx"
            )
        return self._vocabs[name]

    def identity(self) -> dict:
        """Which pair this is, as traces and profiles record it: its name, model type, the
        prompt settings (task, forced language, question, instruction, and for an audio LLM
        the SHA-256 of its rendered chat template), and one digest over every file hash in
        its manifest — each file named by its model and file name, so the digest does not
        depend on where the files lie."""
        import hashlib

        hashes = {f"./{Path(k).name}": v for k, v in self.manifest.get("sha256", {}).items()}
        for role, info in self.manifest["models"].items():
            hashes.update({f"{role}/{Path(k).name}": v for k, v in info.get("sha256", {}).items()})
        digest = hashlib.sha256(json.dumps(sorted(hashes.items())).encode()).hexdigest()
        out = {
            "name": self.name,
            "model_type": self.model_type(),
            "task": self.task or self.default_task(),
            "language": self.language,
            "sha256": digest,
        }
        if self.prompt.question is not None:
            out["question"] = self.prompt.question
        if self.prompt.text is not None:
            out["prompt"] = self.prompt.text
        if self.kind() == "audio-llm-onnx":
            out["prompt_sha256"] = self.prompt_hash()
        return out

    def prompt_hash(self, question: str | None = None) -> str | None:
        """SHA-256 of the target's rendered chat template for these settings (audio LLMs; a
        per-window question renders per window: None then, unless ``question`` is given)."""
        from as2d_cli.models.audio_llm_export import specials_text
        from as2d_cli.models.prompting import render_chat, text_hash

        if self.kind() != "audio-llm-onnx":
            return None
        spec = self.effective_prompt().for_window(question)
        if spec.task == "answer" and spec.question is None and spec.text is None:
            return None
        instruction = spec.instruction()
        if instruction not in self._prompt_hashes:  # a native run asks once per request
            info = self.model("target")
            tok_cfg = json.loads(
                self.path(info["files"]["tokenizer_config"]).read_text(encoding="utf-8")
            )
            text = render_chat(info["chat_template"], instruction, specials_text(tok_cfg), "target")
            self._prompt_hashes[instruction] = text_hash(text)
        return str(self._prompt_hashes[instruction])

    def max_length(self) -> int:
        """The target's committed-token limit: decoder positions less its prompt (an audio
        LLM's: its generation limit, ``max_new_tokens``; the prompt's length is per request)."""
        info = self.model("target")
        if info["kind"] == "whisper-onnx":
            gen = json.loads(self.path(info["files"]["generation"]).read_text(encoding="utf-8"))
            prompt = build_prompt(
                gen, self.task or info.get("task", "transcribe"), self.language, "target"
            )
            return int(info["dims"]["max_tokens"]) - len(prompt)
        if info["kind"] == "audio-llm-onnx":
            return int(info["dims"]["max_new_tokens"])
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

    @property
    def bundled(self) -> bool:
        """The pair shipped in the package (an imported pair is named by its folder)."""
        return _is_bundled(self.directory)

    def verify(self) -> None:
        """Every listed file matches its SHA-256 (loading checks only that each exists): before
        the pair is copied anywhere, e.g. to a phone."""
        _check_files(
            self.directory,
            self.directory / "models.json",
            self.manifest,
            True,
            _fix(self.directory, self.manifest),
        )

    def ctc_chars(self) -> list[str]:
        info = self.model("ctc")
        return list(json.loads(self.path(info["chars"]).read_text(encoding="utf-8"))["chars"])


class PairSettings:
    """A settings object's model ``pair``, loaded once by the command (None: the bundled
    pair), with its folder as ``models`` and its prompt settings as ``prompt`` (None for the
    bundled pair, which takes none)."""

    pair: ModelPair | None

    @property
    def models(self) -> Path | None:
        return None if self.pair is None else self.pair.directory

    @property
    def prompt(self) -> PromptSpec | None:
        return None if self.pair is None else self.pair.prompt


_REIMPORT = "import the pair again with `as2d models import`"


def check_pair_folder(directory: Path) -> None:
    """A ``--models`` folder that cannot be a pair, in words that name the fix: a pair is
    made by `as2d models import`, never by reinstalling as2d (that repairs the bundled pair
    only)."""
    make = f"`as2d models import --target EXPORT --drafter EXPORT --out {directory}`"
    if not directory.exists():
        raise UserError(f"--models {directory}: no such folder; pass a pair folder made by {make}")
    if not directory.is_dir():
        raise UserError(f"--models {directory} is a file, not a model pair folder; pass the folder")
    if (directory / "models.json").is_file():
        return
    if not any(directory.iterdir()):
        raise UserError(
            f"--models {directory} is an empty folder, not a model pair; create the pair with {make}"
        )
    if any(directory.glob("*.onnx")) or any(directory.glob("onnx/*.onnx")):
        raise UserError(
            f"--models {directory} is a model export, not a pair (no models.json); make a pair "
            f"of it with `as2d models import --target {directory} --drafter EXPORT --out PAIR`"
        )
    raise UserError(
        f"--models {directory} is not a model pair (no models.json); create one with {make}"
    )


def _is_bundled(directory: Path) -> bool:
    return directory.resolve() == DEFAULT_DIR.resolve()


def _fix(directory: Path, manifest: dict) -> str:
    """What repairs a pair's files."""
    if _is_bundled(directory) and not manifest.get("imported"):
        return "reinstall the package or rerun training/export.py"
    return "re-import the pair with `as2d models import`"


def _check_files(directory: Path, path: Path, manifest: dict, check_hashes: bool, fix: str) -> None:
    """Every model's entry complete and every listed file present (and, with
    ``check_hashes``, matching its SHA-256)."""
    hashes = dict(manifest["sha256"])
    for name, info in manifest["models"].items():
        for key in ("kind", "dims", "files", "sha256"):
            if key not in info:
                raise FormatError(f"{path}: models.{name} has no {key!r}; {fix}")
        hashes.update(info["sha256"])
    for filename, digest in sorted(hashes.items()):
        f = directory / filename
        if not f.is_file():
            raise UserError(f"model file {f} is missing (listed in {path}); {fix}")
        if check_hashes and sha256_file(f) != digest:
            raise UserError(
                f"model file {f} does not match its SHA-256 in {path}; it was changed or truncated: {fix}"
            )


def _check_prompt(spec: PromptSpec, manifest: dict, directory: Path) -> None:
    """The prompt settings are ones this pair takes (a task, a question, an instruction)."""
    target = manifest["models"].get("target", {})
    kinds = {m.get("kind") for m in manifest["models"].values()}
    if not spec.empty and not kinds & {"whisper-onnx", "audio-llm-onnx"}:
        raise UserError(
            f"--task, --language, --question and --prompt select a prompt; the pair in {directory} "
            "is the bundled transcription pair (drop them, or pass --models PAIR)"
        )
    task = spec.task or str(target.get("task", "transcribe"))
    if spec.question is not None and task != "answer":
        raise UserError(
            f"--question asks a spoken question: use it with --task answer (the pair in {directory} "
            f"{'was given' if spec.task else 'defaults to'} --task {task})"
        )
    if target.get("kind") == "whisper-onnx":
        if spec.task is not None and spec.task not in WHISPER_TASKS:
            raise UserError(
                f"--task {spec.task} needs an audio language model; the pair in {directory} is a "
                "Whisper pair (tasks: transcribe, translate)"
            )
        if spec.text is not None:
            raise UserError(
                f"--prompt sets an audio language model's instruction; the pair in {directory} is a "
                "Whisper pair, whose prompt is its task and language tokens (drop --prompt)"
            )


def load_pair(
    directory: Path | str | None = None,
    check_hashes: bool = True,
    *,
    prompt: PromptSpec | None = None,
) -> ModelPair:
    """Read models.json in ``directory`` (default: the bundled models) and check its files."""
    directory = Path(directory) if directory is not None else DEFAULT_DIR
    bundled = _is_bundled(directory)
    path = directory / "models.json"
    if not bundled:
        check_pair_folder(directory)
    manifest = read_json(
        path,
        f"model manifest {path} not found; reinstall the package or rerun training/export.py",
        "rerun training/export.py" if bundled else _REIMPORT,
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
            else ("rerun training/export.py" if bundled else _REIMPORT)
        )
        raise FormatError(
            f"{path}: model manifest version {version!r} is not supported (this as2d reads {VERSION}); {hint}"
        )
    fix = _fix(directory, manifest)
    for key in ("tokenizer", "specials", "models", "sha256"):
        if key not in manifest:
            raise FormatError(f"{path}: key {key!r} is missing; {fix}")
    _check_files(directory, path, manifest, check_hashes, fix)
    target = manifest["models"].get("target", {})
    vocab = Vocabulary(
        directory / manifest["tokenizer"],
        manifest["specials"],
        target.get("kind") == "audio-llm-onnx",
    )
    spec = prompt or PromptSpec()
    _check_prompt(spec, manifest, directory)
    return ModelPair(directory, manifest, vocab, spec)


def portable_files(pair: ModelPair) -> tuple[list[tuple[str, Path]], dict]:
    """A pair as one self-contained folder (for a phone): (relative name, host file) for
    every file the manifest lists (not ``models.json`` itself), and the manifest rewritten so files referenced outside
    the folder sit at ``<model>/<file name>`` (external weight files keep their names, next
    to the ONNX file that loads them)."""
    import copy

    manifest = copy.deepcopy(pair.manifest)
    out: dict[str, Path] = {}

    def place(key: str, role: str) -> str:
        rel = key if not Path(key).is_absolute() else f"{role}/{Path(key).name}"
        out[rel] = pair.directory / key
        return rel

    manifest["sha256"] = {place(k, "."): v for k, v in manifest["sha256"].items()}
    out[manifest["tokenizer"]] = pair.directory / manifest["tokenizer"]
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
                out[info[key]] = pair.directory / info[key]
    return sorted(out.items()), manifest
