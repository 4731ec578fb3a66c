"""Open a pair's model behind the :class:`~as2d_cli.models.contract.DecoderModel` interface,
by the kind its manifest names (one registry: a new model kind is one entry here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from as2d_cli.errors import UserError
from as2d_cli.models.contract import DecoderModel
from as2d_cli.models.model_pair import ModelPair


def _seq2seq(pair: ModelPair, name: str, threads: int, io: str | None) -> Any:
    from as2d_cli.models.session import Seq2SeqModel

    return Seq2SeqModel(pair, name, threads, io=io)


def _whisper(pair: ModelPair, name: str, threads: int, io: str | None) -> Any:
    from as2d_cli.models.whisper import WhisperModel

    return WhisperModel(pair, name, threads, io=io)


def _audio_llm(pair: ModelPair, name: str, threads: int, io: str | None) -> Any:
    from as2d_cli.models.audio_llm import AudioLlmModel

    return AudioLlmModel(pair, name, threads, io=io)


# Manifest kind -> the adapter that opens it.
KINDS: dict[str, Callable[[ModelPair, str, int, str | None], Any]] = {
    "seq2seq": _seq2seq,
    "whisper-onnx": _whisper,
    "audio-llm-onnx": _audio_llm,
}


def open_seq2seq(
    pair: ModelPair, name: str, threads: int = 1, ahead: bool = False, io: str | None = None
) -> DecoderModel:
    """The pair's model ``name`` behind the DecoderModel interface, by its kind; ``ahead``
    opens its look-ahead decoder (the ``lookahead`` source's, bundled models only); ``io``:
    how its decoder calls pass values to ONNX Runtime (:mod:`as2d_cli.models.ortio`)."""
    kind = pair.model(name)["kind"]
    if kind == "seq2seq" and ahead:
        from as2d_cli.models.session import Seq2SeqModel

        return Seq2SeqModel(pair, name, threads, ahead=True, io=io)
    if ahead:
        raise UserError(
            f"model {name!r} in {pair.directory} is a {kind!r} model without a look-ahead "
            "decoder; use the drafter source"
        )
    if kind not in KINDS:
        raise UserError(
            f"model {name!r} in {pair.directory} is a {kind!r} model, not a decoder "
            f"(kinds: {', '.join(KINDS)})"
        )
    return KINDS[kind](pair, name, threads, io)
