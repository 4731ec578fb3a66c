"""How a decoder adapter hands values to ONNX Runtime: numpy feeds, or OrtValues kept.

Every decoder adapter (:class:`~as2d_cli.models.session.Seq2SeqModel`,
:class:`~as2d_cli.models.whisper.WhisperModel`,
:class:`~as2d_cli.models.audio_llm.AudioLlmModel`) takes ``io``:

* ``"ortvalue"`` (:data:`DEFAULT_IO`): decoder calls go through
  :meth:`~as2d_cli.models.timing.TimedSession.run_with_ort_values`. The self-attention
  caches stay the OrtValues ONNX Runtime returned (never converted to numpy and back); the
  inputs constant over a request (cross-attention K/V, the encoder states) are wrapped once
  per request in a :class:`RequestFeeds` kept on the request's :class:`Cross`; tokens,
  attention mask and positions are views of int64 buffers allocated once per request; the
  logits are a view of ORT's output, not a copy.
* ``"numpy"``: every call feeds numpy arrays to ``run`` and gets numpy arrays back (the
  baseline ``benchmarks/hot_path.py`` compares against).

Both run the same graphs on the same values: the logits are equal bit for bit. A cache
is a ``(keys, values)`` pair of per-layer arrays of either kind; :func:`cache_length`,
:func:`truncate_cache` and :func:`as_array` read both.

ONNX Runtime is imported on first use (importing the models package stays cheap).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from as2d_cli.errors import UserError
from as2d_cli.models.contract import Cache, Cross

IO_MODES = ("ortvalue", "numpy")
DEFAULT_IO = "ortvalue"


def io_mode(io: str | None) -> str:
    """``io`` checked (None: :data:`DEFAULT_IO`)."""
    mode = DEFAULT_IO if io is None else io
    if mode not in IO_MODES:
        raise UserError(f"decoder io {mode!r} is not one of {', '.join(IO_MODES)}")
    return mode


@functools.cache
def _binding() -> tuple[Any, Any]:
    """ORT's binding-level OrtValue class and the CPU device (the layer the adapters call)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return C.OrtValue, C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)


def wrap(a: np.ndarray) -> Any:
    """An OrtValue over ``a``'s memory, no copy: ``a`` must be C-contiguous and the caller
    keeps it alive while the OrtValue is used (ORT's binding holds no reference to it)."""
    ov, cpu = _binding()
    return ov.ortvalue_from_numpy(a, cpu)


def owned(a: np.ndarray) -> Any:
    """An OrtValue holding its own C-contiguous copy of ``a`` (one copy, any layout)."""
    ov, cpu = _binding()
    v = ov.ortvalue_from_shape_and_type(a.shape, a.dtype.type, cpu)
    v.numpy()[...] = a
    return v


def as_array(x: Any) -> np.ndarray:
    """A cache entry or an output as numpy: itself, or a view of the OrtValue's memory."""
    return x if isinstance(x, np.ndarray) else x.numpy()


def writable_logits(x: Any, io: str) -> np.ndarray:
    """The first row of a logits output as float32 the caller may write into (suppression
    does): numpy's outputs are copied, an OrtValue's buffer is the caller's own already."""
    logits = as_array(x)[0]
    if io == "numpy" or logits.dtype != np.float32:
        logits = np.array(logits, dtype=np.float32)
    return logits


def cache_length(cache: Cache) -> int:
    """The number of cached positions P."""
    x = cache[0][0]
    return int(x.shape[2] if isinstance(x, np.ndarray) else x.shape()[2])


def truncate_cache(cache: Cache, length: int) -> Cache:
    """The cache rolled back to its first ``length`` positions. numpy entries: views, which
    ``run`` copies (they are not contiguous); OrtValue entries: one contiguous copy each,
    what the next call reads as is (none when nothing is dropped)."""
    first = cache[0][0]
    if isinstance(first, np.ndarray):
        return (
            tuple(k[:, :, :length] for k in cache[0]),
            tuple(v[:, :, :length] for v in cache[1]),
        )
    if first.shape()[2] == length:
        return cache
    return (
        tuple(owned(k.numpy()[:, :, :length]) for k in cache[0]),
        tuple(owned(v.numpy()[:, :, :length]) for v in cache[1]),
    )


def empty_kv(layers: int, heads: int, head_dim: int, io: str) -> Cache:
    """A cache of no positions, per layer (1, heads, 0, head_dim) float32, of ``io``'s kind."""
    make = (lambda a: a) if io == "numpy" else owned
    empty = tuple(make(np.zeros((1, heads, 0, head_dim), dtype=np.float32)) for _ in range(layers))
    return (empty, empty)


class RequestFeeds:
    """One request's decoder feeds for one model under ``io="ortvalue"``.

    ``values`` is the feed dict handed to every call: the request's constant inputs are
    put in once, each call overwrites its own entries (one dict, not one per call). The
    token ids, attention mask and positions a call feeds are views of buffers of the
    model's ``positions`` allocated here. Not shared between threads: a request's Cross
    belongs to the one agent (target, drafter or source) that decodes it.
    """

    __slots__ = ("owner", "values", "_keep", "_ids", "_ones", "_positions", "_scalars")

    def __init__(self, owner: object, constant: dict[str, Any], positions: int) -> None:
        self.owner = owner
        self._keep: list[np.ndarray] = []  # the memory the wrapped constants point into
        self.values: dict[str, Any] = {}
        for name, a in constant.items():
            if isinstance(a, np.ndarray):
                a = np.ascontiguousarray(a)
                self._keep.append(a)
                a = wrap(a)
            self.values[name] = a
        self._ids = np.zeros((1, positions), dtype=np.int64)
        self._ones: np.ndarray | None = None
        self._positions: np.ndarray | None = None
        self._scalars: dict[int, tuple[np.ndarray, Any]] = {}

    def ids(self, tokens: Sequence[int]) -> Any:
        """``tokens`` as a (1, K) int64 OrtValue (valid until the next call of this method)."""
        k = len(tokens)
        if k > self._ids.shape[1]:  # past the model's positions: the model reports it
            self._ids = np.zeros((1, k), dtype=np.int64)
        self._ids[0, :k] = tokens
        return wrap(self._ids[:, :k])

    def ones(self, n: int) -> Any:
        """A (1, n) int64 all-ones attention mask."""
        if self._ones is None or self._ones.shape[1] < n:
            self._ones = np.ones((1, max(n, self._ids.shape[1])), dtype=np.int64)
        return wrap(self._ones[:, :n])

    def positions(self, start: int, k: int) -> Any:
        """Positions ``start .. start+k-1`` as a (1, k) int64 OrtValue."""
        if self._positions is None or self._positions.shape[1] < start + k:
            self._positions = np.arange(max(start + k, self._ids.shape[1]), dtype=np.int64)[None]
        return wrap(self._positions[:, start : start + k])

    def scalar(self, value: int) -> Any:
        """An int64 scalar OrtValue (kept per value)."""
        got = self._scalars.get(value)
        if got is None:
            a = np.array(value, dtype=np.int64)
            got = self._scalars[value] = (a, wrap(a))
        return got[1]


def request_feeds(
    cross: Cross, owner: object, constant: Callable[[], dict[str, Any]], positions: int
) -> RequestFeeds:
    """The :class:`RequestFeeds` ``owner`` keeps on ``cross``, made from ``constant()`` (the
    request's constant inputs by name, numpy arrays or OrtValues) on its first call."""
    feeds = cross.feeds
    if feeds is None or feeds.owner is not owner:
        feeds = cross.feeds = RequestFeeds(owner, constant(), positions)
    return feeds
