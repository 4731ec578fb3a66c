"""Open a pair's encoder-decoder model behind the :class:`~as2d_cli.models.contract.DecoderModel`
interface, by the kind its manifest names."""

from __future__ import annotations

from as2d_cli.errors import UserError
from as2d_cli.models.bundle import ModelBundle
from as2d_cli.models.contract import DecoderModel
from as2d_cli.models.session import Seq2SeqModel
from as2d_cli.models.whisper import WhisperModel


def open_seq2seq(
    bundle: ModelBundle, name: str, threads: int = 1, ahead: bool = False
) -> DecoderModel:
    """The pair's model ``name`` behind the DecoderModel interface, by its kind; ``ahead``
    opens its look-ahead decoder (the ``lookahead`` source's, bundled models only)."""
    kind = bundle.model(name)["kind"]
    if kind == "seq2seq":
        return Seq2SeqModel(bundle, name, threads, ahead=ahead)
    if ahead:
        raise UserError(
            f"model {name!r} in {bundle.directory} is a {kind!r} model without a look-ahead "
            "decoder; use the drafter source"
        )
    if kind == "whisper-onnx":
        return WhisperModel(bundle, name, threads)
    raise UserError(
        f"model {name!r} in {bundle.directory} is a {kind!r} model, not an encoder-decoder "
        "(kinds: seq2seq, whisper-onnx)"
    )
