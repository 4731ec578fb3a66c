"""Torch definition of the bundled audio language model (training and export only).

An audio LLM in the shape the paper measures (an audio encoder feeding a decoder-only
language model), small enough to train on a CPU:

* ``AudioTower``: Whisper-style log-mel features (80 bins, what the toolkit's audio-LLM
  adapter computes at run time) -> a linear feature adapter -> the bundled target's speech
  encoder (stride 4: 25 frames/s, warm-started from its ONNX file) -> two frames stacked
  (12.5 audio embeddings per second) -> a two-layer projector into the language model's
  embedding space. The adapter starts as the least-squares map from the Whisper features to
  the features the encoder was trained on (``fit_adapter``).
* ``TextModel``: a Llama-style decoder (RMSNorm, rotary positions, grouped-query attention,
  SiLU-gated MLP, tied token embeddings). Its ``forward(inputs_embeds, attention_mask,
  position_ids, *past)`` is the merged decoder graph the export writes: prefill and K-wide
  calls over the cache alike.

The prompt is the chat template (``CHAT_TEMPLATE``) rendered for one user turn: the audio
placeholder, then the task's instruction; the placeholder is expanded to the tower's rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from models import Dims, Encoder, out_frames
from torch import nn

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio|>"]
PAD, IM_START, EOS, AUDIO = SPECIALS
# One user turn (the audio, then the instruction) and the assistant's generation prompt;
# rendered by as2d_cli.models.prompting.render_chat exactly as the toolkit renders it.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'audio' %}<|audio|>{% else %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class AlmConfig:
    hidden: int = 256
    layers: int = 6
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 768
    vocab: int = 2048
    max_positions: int = 1024
    rope_theta: float = 10000.0
    stack: int = 2  # encoder frames per audio embedding
    n_mels: int = 80
    encoder: dict = field(default_factory=lambda: asdict(Dims()))

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def encoder_dims(self) -> Dims:
        return Dims(**self.encoder).encoder_dims()

    def to_dict(self) -> dict:
        return asdict(self)


TARGET = AlmConfig()
# The drafter: the target's first two decoder blocks (its width, tower and embeddings),
# warm-started from the trained target (alm_train.py --init-from) and distilled on its answers.
DRAFTER = AlmConfig(layers=2)


def audio_rows(mel_frames: torch.Tensor, stack: int) -> torch.Tensor:
    """Audio embeddings for a number of feature frames (the tower's output rows)."""
    s = out_frames(mel_frames, 4)
    return torch.div(s + stack - 1, stack, rounding_mode="floor")


class AudioTower(nn.Module):
    def __init__(self, cfg: AlmConfig):
        super().__init__()
        ed = cfg.encoder_dims()
        self.stack = cfg.stack
        self.adapter = nn.Linear(cfg.n_mels, ed.n_mels)
        self.encoder = Encoder(ed)
        self.proj = nn.Sequential(
            nn.Linear(cfg.stack * ed.d, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, cfg.hidden)
        )

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """feats (B, T, n_mels) Whisper log-mel -> (B, S, hidden); rows past a clip's
        ``audio_rows`` are padding."""
        return self.project(self.encode(feats, lengths))

    def encode(self, feats: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's frames (B, S, d), zero past each clip's end."""
        enc, mask = self.encoder(self.adapter(feats), lengths)
        if mask is not None:  # zeros past a clip's end, as the single-clip graph pads them
            enc = enc * mask[:, 0, 0, :, None].to(enc.dtype)
        return enc

    def project(self, enc: torch.Tensor) -> torch.Tensor:
        """Encoder frames (B, S, d) -> stacked and projected audio embeddings."""
        b, s, d = enc.shape
        pad = (-s) % self.stack
        if pad:
            enc = F.pad(enc, (0, 0, 0, pad))
        return self.proj(enc.reshape(b, (s + pad) // self.stack, self.stack * d))


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Block(nn.Module):
    def __init__(self, cfg: AlmConfig):
        super().__init__()
        h, kv, dh = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.h, self.kv, self.dh = h, kv, dh
        self.ln1, self.ln2 = RMSNorm(cfg.hidden), RMSNorm(cfg.hidden)
        self.q = nn.Linear(cfg.hidden, h * dh, bias=False)
        self.k = nn.Linear(cfg.hidden, kv * dh, bias=False)
        self.v = nn.Linear(cfg.hidden, kv * dh, bias=False)
        self.o = nn.Linear(h * dh, cfg.hidden, bias=False)
        self.gate = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)
        self.p = 0.0  # residual dropout while training (set_dropout); none in the export
        self.keep: list | None = None  # training: the attention maps, for the guided loss

    def forward(self, x, cos, sin, mask, past_k, past_v):
        b, s, _ = x.shape
        y = self.ln1(x)
        q = self.q(y).view(b, s, self.h, self.dh).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.dh).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.dh).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        rep = self.h // self.kv
        kk = k.repeat_interleave(rep, dim=1) if rep > 1 else k
        vv = v.repeat_interleave(rep, dim=1) if rep > 1 else v
        w = torch.matmul(q, kk.transpose(2, 3)) / math.sqrt(self.dh) + mask
        probs = torch.softmax(w, dim=-1)
        if self.keep is not None:
            self.keep.append(probs)
        a = torch.matmul(probs, vv)
        a = self.o(a.transpose(1, 2).reshape(b, s, self.h * self.dh))
        x = x + F.dropout(a, self.p, self.training)
        y = self.ln2(x)
        return (
            x + F.dropout(self.down(F.silu(self.gate(y)) * self.up(y)), self.p, self.training),
            k,
            v,
        )


def set_dropout(model: nn.Module, p: float) -> None:
    """Residual dropout ``p`` in every decoder block (training only)."""
    for m in model.modules():
        if isinstance(m, Block):
            m.p = p


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TextModel(nn.Module):
    def __init__(self, cfg: AlmConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.hidden)
        inv = 1.0 / cfg.rope_theta ** (
            torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim
        )
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        """inputs_embeds (B, S, hidden), attention_mask (B, P + S) (1 = a real position),
        position_ids (B, S), past 2 x layers tensors (B, kv, P, head_dim) -> logits (B, S,
        vocab) and the present caches (B, kv, P + S, head_dim)."""
        b, s, _ = inputs_embeds.shape
        total = attention_mask.shape[1]
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        q_pos = torch.arange(s) + (total - s)
        allowed = (torch.arange(total)[None, :] <= q_pos[:, None])[None, None] & (
            attention_mask[:, None, None, :] > 0
        )
        mask = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)
        h = inputs_embeds
        presents = []
        for i, blk in enumerate(self.blocks):
            h, k, v = blk(h, cos, sin, mask, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return (self.norm(h) @ self.embed.weight.T, *presents)

    def empty_past(self, batch: int) -> list[torch.Tensor]:
        z = torch.zeros(batch, self.cfg.kv_heads, 0, self.cfg.head_dim)
        return [z] * (2 * self.cfg.layers)


class AudioLM(nn.Module):
    def __init__(self, cfg: AlmConfig):
        super().__init__()
        self.cfg = cfg
        self.tower = AudioTower(cfg)
        self.text = TextModel(cfg)

    def embed_batch(
        self,
        feats: torch.Tensor,
        frames: torch.Tensor,
        ids: torch.Tensor,
        audio_at: torch.Tensor,
        encoded: bool = False,
        keep: list | None = None,
    ) -> torch.Tensor:
        """The decoder's input rows: token embeddings of ``ids`` (B, L) with the audio
        embeddings in the placeholder positions; ``audio_at`` (B,) where each row's audio
        rows begin (they are contiguous, ``audio_rows(frames)`` of them). ``feats`` may be
        the encoder's frames already (``encoded``: a frozen tower's, cached by training)."""
        audio = self.tower.project(feats) if encoded else self.tower(feats, frames)
        if keep is not None:  # training: the audio embeddings, for the auxiliary CTC loss
            keep.append(audio)
        x = self.text.embed(ids)
        n = audio_rows(frames, self.cfg.stack)
        rows = []
        for i in range(ids.shape[0]):
            a, k = int(audio_at[i]), int(n[i])
            rows.append(torch.cat([x[i, :a], audio[i, :k], x[i, a + k :]], dim=0))
        return torch.stack(rows)

    def forward(self, feats, frames, ids, audio_at, attention_mask, encoded=False, keep=None):
        x = self.embed_batch(feats, frames, ids, audio_at, encoded, keep)
        pos = torch.arange(ids.shape[1])[None].expand(ids.shape[0], -1)
        return self.text(x, attention_mask, pos, *self.text.empty_past(ids.shape[0]))[0]
