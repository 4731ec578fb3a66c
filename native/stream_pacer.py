"""The pacer: a recording cut into non-overlapping blocks that arrive in real time.

Block i covers audio ``[start, end)`` and arrives when its last sample does (stream time
``end``: the recording starts arriving at time 0). Audio and committed text persist in a
context epoch of at most ``context_s`` seconds of audio; a block that would make the epoch
longer starts a new one (with 4 s blocks and 12 s context: three blocks per epoch).
Only arrived audio can be read: :meth:`Pacer.audio` refuses a block that has not arrived.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from as2d_cli.errors import EngineError, UserError
from native.stream_clock import StreamClock

RATE = 16_000
MIN_BLOCK_SAMPLES = 400  # shorter than one encoder frame's receptive field: not a block
EPS = 1e-9


@dataclass(frozen=True)
class Block:
    index: int
    epoch: int  # context epoch
    start: int  # samples
    end: int
    context_start: int  # the epoch's first sample: the block's audio context begins here

    @property
    def start_s(self) -> float:
        return self.start / RATE

    @property
    def end_s(self) -> float:
        return self.end / RATE

    @property
    def arrival_s(self) -> float:
        """When the block's last sample arrives (stream time)."""
        return self.end / RATE

    @property
    def epoch_start(self) -> bool:
        return self.context_start == self.start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_blocks(n_samples: int, block_s: float, context_s: float) -> list[Block]:
    """The stream's blocks. A final remainder shorter than MIN_BLOCK_SAMPLES is not a block
    (the caller records it as the dropped tail)."""
    if block_s <= 0:
        raise UserError(f"--block-s must be positive, got {block_s:g}")
    if context_s + EPS < block_s:
        raise UserError(
            f"--context-s {context_s:g} is shorter than one block ({block_s:g} s); "
            "use a context of at least one block"
        )
    size = int(round(block_s * RATE))
    blocks: list[Block] = []
    epoch, epoch_start = -1, 0
    for i in range(math.ceil(n_samples / size)):
        a, b = i * size, min((i + 1) * size, n_samples)
        if b - a < MIN_BLOCK_SAMPLES:
            break
        if epoch < 0 or (b - epoch_start) / RATE > context_s + EPS:
            epoch, epoch_start = epoch + 1, a
        blocks.append(Block(len(blocks), epoch, a, b, epoch_start))
    if not blocks:
        raise UserError(
            f"the audio ({n_samples / RATE:.2f} s) holds no whole block; it needs at least "
            f"{MIN_BLOCK_SAMPLES / RATE:.3f} s"
        )
    return blocks


class Pacer:
    """Releases the blocks of ``audio`` at their arrival times on ``clock``."""

    def __init__(self, audio: np.ndarray, blocks: list[Block], clock: StreamClock) -> None:
        self._audio = audio
        self.blocks = blocks
        self.clock = clock

    def arrived(self, i: int) -> bool:
        return self.clock.now() + EPS >= self.blocks[i].arrival_s

    def arrived_count(self) -> int:
        """Blocks whose last sample has arrived by now."""
        now = self.clock.now() + EPS
        return sum(1 for b in self.blocks if b.arrival_s <= now)

    def wait(self, i: int, stop: threading.Event) -> bool:
        """Wait (from another thread) for block i; False when ``stop`` is set first."""
        return self.clock.wait_until(self.blocks[i].arrival_s, stop)

    def audio(self, i: int, *, context: bool = False) -> np.ndarray:
        """Block i's samples (with ``context``: from its epoch's start). Reading a block that
        has not arrived is a programming error: nothing may read the future."""
        if not self.arrived(i):
            raise EngineError(
                f"block {i} read at {self.clock.now():.3f} s, before it arrives at "
                f"{self.blocks[i].arrival_s:.3f} s"
            )
        b = self.blocks[i]
        return self._audio[b.context_start if context else b.start : b.end]
