"""Whisper's decoder prompt from a ``generation_config.json``: what the model processes
before its first generated token. Needs no model files, so a pair's manifest can size its
limits without opening the model."""

from __future__ import annotations

from as2d_cli.errors import UserError

HINT = "re-export it with `optimum-cli export onnx --task automatic-speech-recognition-with-past`"


def build_prompt(generation: dict, task: str, language: str | None, where: str) -> tuple[int, ...]:
    """Whisper's decoder prompt: start of transcript, then for a multilingual model the
    language and task tokens, then no-timestamps (timestamps are never predicted here)."""
    start = generation.get("decoder_start_token_id")
    if not isinstance(start, int):
        raise UserError(f"{where}: 'decoder_start_token_id' is missing; {HINT}")
    prompt = [start]
    lang_to_id = generation.get("lang_to_id") or {}
    task_to_id = generation.get("task_to_id") or {}
    if generation.get("is_multilingual", bool(lang_to_id)) and lang_to_id:
        code = (language or "en").lower()
        key = f"<|{code}|>"
        if key not in lang_to_id:
            have = ", ".join(sorted(k.strip("<|>") for k in lang_to_id))
            raise UserError(
                f"{where}: the model has no language {code!r} (it knows: {have}); pass one with --language"
            )
        if task not in task_to_id:
            raise UserError(
                f"{where}: the model has no task {task!r} (it knows: {', '.join(sorted(task_to_id))})"
            )
        prompt += [int(lang_to_id[key]), int(task_to_id[task])]
    elif task != "transcribe":
        raise UserError(f"{where}: an English-only model can only transcribe; drop --task {task}")
    no_ts = generation.get("no_timestamps_token_id")
    if isinstance(no_ts, int):
        prompt.append(no_ts)
    return tuple(prompt)
