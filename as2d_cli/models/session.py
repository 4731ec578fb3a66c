"""ONNX Runtime sessions pinned to their own intra-op thread count, and the seq2seq calls.

Each session gets ``intra_op_num_threads`` (default 1) and sequential execution, so a target
and a source each keep to one core and run concurrently from two Python threads (ORT
releases the GIL while it computes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from as2d_cli.errors import UserError
from as2d_cli.models.contract import Cache, Cross  # noqa: F401  (re-exported)
from as2d_cli.models.features import log_mel
from as2d_cli.models.model_pair import ModelPair
from as2d_cli.models.ortio import (  # noqa: F401  (cache_length, truncate_cache re-exported)
    as_array,
    cache_length,
    empty_kv,
    io_mode,
    request_feeds,
    truncate_cache,
)
from as2d_cli.models.timing import TimedSession


def make_session(path, threads: int = 1, hint: str = "rerun training/export.py"):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    try:
        return TimedSession(
            ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        )
    except Exception as exc:  # ORT raises its own exception types for bad files
        raise UserError(
            f"ONNX Runtime cannot load {path} ({str(exc).splitlines()[0]}); {hint}"
        ) from None


def _check_io(sess, path, inputs: list[str], outputs: list[str]) -> None:
    have_in = [i.name for i in sess.get_inputs()]
    have_out = [o.name for o in sess.get_outputs()]
    if have_in != inputs or have_out != outputs:
        raise UserError(
            f"{path} has inputs {have_in} and outputs {have_out}, expected {inputs} -> {outputs}; "
            "it does not belong to this as2d version: rerun training/export.py"
        )


ENCODER_IO = (["mel"], ["cross_k", "cross_v", "hidden"])
CROSS_IO = (["hidden"], ["cross_k", "cross_v"])


AHEAD_OUTPUT = "ahead_logits"  # the look-ahead decoder's extra, last output


def decoder_io(layers: int) -> tuple[list[str], list[str]]:
    """The decoder file's input and output names (models.json v2): per-layer caches and cross
    K/V, because ONNX Runtime copies every slice it takes of a stacked input."""
    per = lambda name: [f"{name}_{i}" for i in range(layers)]  # noqa: E731
    return (
        ["tokens", *per("past_k"), *per("past_v"), *per("cross_k"), *per("cross_v")],
        ["logits", *per("present_k"), *per("present_v")],
    )


class Seq2SeqModel:
    """One encoder-decoder (target or drafter): encode once, then decoder calls of K tokens.

    A model whose manifest entry says ``encoder_from: <model>`` has no encoder of its own: it
    reads that model's encoder states through its own cross-attention projection (``cross``
    file). Given the other model's :attr:`Cross.hidden` for the request it needs only that
    projection (:meth:`encode_hidden`); :meth:`encode` runs the shared encoder file itself.
    """

    def __init__(
        self,
        pair: ModelPair,
        name: str,
        threads: int = 1,
        ahead: bool = False,
        io: str | None = None,
    ) -> None:
        info = pair.model(name)
        if info["kind"] != "seq2seq":
            raise UserError(
                f"model {name!r} in {pair.directory} is a {info['kind']} model, not an encoder-decoder"
            )
        self.name = name
        self.dims = dict(info["dims"])
        self.vocab = pair.vocab
        if int(self.dims["vocab"]) != pair.vocab.size:
            raise UserError(
                f"model {name!r} has a {self.dims['vocab']}-token output but the tokenizer has "
                f"{pair.vocab.size}; the pair is mixed: rerun training/export.py"
            )
        self.max_positions = int(self.dims["max_tokens"])
        self.encoder_from: str | None = info.get("encoder_from")
        if self.encoder_from is not None:
            owner = pair.model(self.encoder_from)
            enc_path = pair.path(owner["files"]["encoder"])
            if int(owner["dims"]["d"]) != int(self.dims["enc_d"]):
                raise UserError(
                    f"model {name!r} reads {self.encoder_from!r}'s encoder states of width "
                    f"{owner['dims']['d']}, but was built for {self.dims['enc_d']}: rerun training/export.py"
                )
            cross_path = pair.path(info["files"]["cross"])
            self.cross = make_session(cross_path, threads)
            _check_io(self.cross, cross_path, *CROSS_IO)
        else:
            enc_path = pair.path(info["files"]["encoder"])
        # ``ahead``: the decoder file with the look-ahead head's extra output (models.json
        # ``files.ahead_decoder``), for the self-speculating source; same weights otherwise.
        self.ahead = ahead
        if ahead and not pair.has_ahead(name):
            raise UserError(
                f"model {name!r} in {pair.directory} has no look-ahead decoder; use the "
                "drafter source, or export one with training/train_ahead.py and training/export.py"
            )
        dec_path = pair.path(info["files"]["ahead_decoder" if ahead else "decoder"])
        self.encoder = make_session(enc_path, threads)
        self.decoder = make_session(dec_path, threads)
        _check_io(self.encoder, enc_path, *ENCODER_IO)
        L, H, d = int(self.dims["dec_layers"]), int(self.dims["heads"]), int(self.dims["d"])
        ins, outs = decoder_io(L)
        self._io = (ins, [*outs, AHEAD_OUTPUT] if ahead else outs)
        _check_io(self.decoder, dec_path, *self._io)
        self.io = io_mode(io)  # ortio: OrtValues kept between calls, or numpy feeds
        self._past_in = ins[1 : 1 + 2 * L]
        self._cross_in = ins[1 + 2 * L :]
        self._empty: Cache = empty_kv(L, H, d // H, self.io)

    def prompt_for(
        self, language: str | None = None, question: str | None = None
    ) -> tuple[int, ...]:
        """The decoder prompt: <sot> alone (the bundled models know no task or language)."""
        return (self.vocab.sot,)

    def encode(
        self, audio: np.ndarray, language: str | None = None, question: str | None = None
    ) -> Cross:
        return self.encode_features(log_mel(audio)[None])

    def encode_features(self, mel: np.ndarray) -> Cross:
        """:meth:`encode` from precomputed log-mel features, shape (1, T, n_mels)."""
        if self.encoder_from is not None:
            (hidden,) = self.encoder.run(["hidden"], {"mel": mel})
            return self.encode_hidden(hidden)
        k, v, hidden = self.encoder.run(None, {"mel": mel})
        return Cross(k, v, hidden, self.prompt_for())

    def encode_hidden(self, hidden: np.ndarray) -> Cross:
        """The cross-attention K/V from the shared encoder's states for this request (the
        ``encoder_from`` model's :attr:`Cross.hidden`): a projection, no audio encoding."""
        if self.encoder_from is None:
            raise UserError(
                f"model {self.name!r} has its own encoder; it cannot read another model's states"
            )
        k, v = self.cross.run(None, {"hidden": hidden})
        return Cross(k, v, hidden, self.prompt_for())

    def encode_request(
        self,
        audio: np.ndarray,
        hidden: np.ndarray | None = None,
        language: str | None = None,
        question: str | None = None,
    ) -> Cross:
        """The request's encoding: from ``hidden`` (the ``encoder_from`` model's states for
        this audio) when this model reads another's encoder and they are given, else from the
        audio itself."""
        if hidden is not None and self.encoder_from is not None:
            return self.encode_hidden(hidden)
        return self.encode(audio, language)

    def shares_encoder_of(self, other: Seq2SeqModel) -> bool:
        """True when this model reads ``other``'s encoder states (so ``other``'s
        :attr:`Cross.hidden` for a request can stand in for encoding the audio again)."""
        return self.encoder_from is not None and self.encoder_from == other.name

    def empty_cache(self) -> Cache:
        return self._empty

    def decode(self, tokens: Sequence[int], past: Cache, cross: Cross) -> tuple[np.ndarray, Cache]:
        """Process ``tokens`` after ``past``: logits (K, V) and the present cache."""
        logits, _, cache = self.decode_ahead(tokens, past, cross)
        return logits, cache

    def decode_ahead(
        self, tokens: Sequence[int], past: Cache, cross: Cross
    ) -> tuple[np.ndarray, np.ndarray | None, Cache]:
        """As :meth:`decode`, with the look-ahead logits (K, V) — at each position, of the
        token after the greedy one there — when opened with ``ahead`` (else None)."""
        if cache_length(past) + len(tokens) > self.max_positions:
            raise UserError(
                f"{self.name}: {cache_length(past) + len(tokens)} decoder positions exceed the model's "
                f"{self.max_positions}; lower the generation limit"
            )
        L = len(past[0])
        if self.io == "numpy":
            # cross.k[i] of the stacked (L, 1, H, S, dh) encoder output is a contiguous view
            values = [
                np.asarray(tokens, dtype=np.int64)[None],
                *past[0],
                *past[1],
                *cross.k,
                *cross.v,
            ]
            out = self.decoder.run(None, dict(zip(self._io[0], values)))
        else:
            feeds = request_feeds(
                cross,
                self,
                lambda: dict(zip(self._cross_in, [*cross.k, *cross.v])),
                self.max_positions,
            )
            f = feeds.values
            f["tokens"] = feeds.ids(tokens)
            for name, x in zip(self._past_in, (*past[0], *past[1])):
                f[name] = x
            out = self.decoder.run_with_ort_values(self._io[1], f)
        out = [out[i] for i in range(len(self._io[1]))]  # an OrtValueVector does not slice
        ahead = as_array(out[1 + 2 * L])[0] if self.ahead else None
        return as_array(out[0])[0], ahead, (tuple(out[1 : 1 + L]), tuple(out[1 + L : 1 + 2 * L]))


def softmax_max(logits: np.ndarray) -> np.ndarray:
    """Per-row softmax probability of the arg-max token (the drafter's confidence)."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return 1.0 / np.exp(z).sum(axis=-1)


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Per-row gap between the largest and second-largest logit (Appendix F.6): each row's
    maximum less the maximum of the row with that one entry masked. The same values as a
    partition's, at a fraction of its cost over a wide verification's rows (16 rows of
    1,024 logits: 9 µs against 78 µs), which every target call pays."""
    flat = logits.reshape(-1, logits.shape[-1])
    rows = np.arange(flat.shape[0])
    top = flat.argmax(axis=-1)
    first = flat[rows, top]
    rest = flat.copy()
    rest[rows, top] = -np.inf
    return (first - rest.max(axis=-1)).reshape(logits.shape[:-1])
