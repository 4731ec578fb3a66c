"""Torch definitions of the three models (training and ONNX export only; never imported at run time).

- ``Seq2Seq``: a Whisper-like encoder-decoder (stride-4 conv front end, pre-LN transformer
  encoder, decoder with learned positions and a tied output projection) used for both the
  target and the drafter, plus an auxiliary CTC head on the encoder (training only) that
  makes the decoder start listening early.
- ``CtcModel``: an encoder-only character CTC recognizer (the chunked external source).

The decoder layer's forward takes explicit past self-attention K/V and precomputed
cross-attention K/V, and returns the present K/V, so the exported ONNX decoder is exactly
the function that was trained (training passes an empty past).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Dims:
    n_mels: int = 80
    d: int = 256
    heads: int = 4
    enc_layers: int = 4
    dec_layers: int = 4
    ffn: int = 1024
    vocab: int = 1024
    max_tokens: int = 320
    conv_kernel: int = 0  # >0: a depthwise convolution module in every encoder layer
    stride: int = 4  # mel frames per encoder frame: 4 (25 frames/s) or 2 (50 frames/s)
    # An encoder of another shape than the decoder (0: the decoder's): the shared-encoder
    # drafter listens through a copy of the target's encoder (d 256) with a 192-wide decoder.
    enc_d: int = 0
    enc_heads: int = 0
    enc_ffn: int = 0

    def encoder_dims(self) -> Dims:
        """The dimensions the encoder (and the encoder's CTC head) are built with."""
        return Dims(
            **{
                **asdict(self),
                "d": self.enc_d or self.d,
                "heads": self.enc_heads or self.heads,
                "ffn": self.enc_ffn or self.ffn,
                "enc_d": 0,
                "enc_heads": 0,
                "enc_ffn": 0,
            }
        )

    def to_dict(self) -> dict:
        return asdict(self)


TARGET = Dims(d=256, heads=4, enc_layers=4, dec_layers=4, ffn=1024)
DRAFTER = Dims(d=192, heads=3, enc_layers=3, dec_layers=2, ffn=768)
# The drafter's decoder on a frozen copy of the target's encoder (train.py --shared-encoder):
# both models then hear the same acoustic evidence, so the drafter errs where the target does.
SHARED_DRAFTER = Dims(
    d=192, heads=3, enc_layers=4, dec_layers=2, ffn=768, enc_d=256, enc_heads=4, enc_ffn=1024
)
# The character CTC runs at 50 frames/s: espeak speaks ~26 characters/s (median, test
# split; up to 33), and CTC needs at least one frame per character, so at 25 frames/s most
# utterances had no valid alignment (their loss was zeroed) and the model barely learned.
CTC = Dims(d=192, heads=3, enc_layers=5, dec_layers=0, ffn=768, stride=2)


DROPOUT = 0.0  # residual-branch dropout while training (train.py --dropout); eval/export ignore it
# export.py: the decoder graph is traced for batch 1 with constant reshape targets, so ONNX
# Runtime runs no per-call shape arithmetic (Shape/Gather/Concat chains: a fifth of a small
# decoder's nodes, though only ~2 % of a call's time on an Intel Xeon VM, 2026-12-02). Same math.
STATIC_BATCH = False


def _drop(x: torch.Tensor, training: bool) -> torch.Tensor:
    return F.dropout(x, DROPOUT, training) if DROPOUT > 0 else x


def sinusoids(length: int | torch.Tensor, d: int) -> torch.Tensor:
    """Fixed sinusoidal positions (length, d); computed on the fly so any length works."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    inv = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos * inv[None, :]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    keep: list | None = None,
) -> torch.Tensor:
    """q (B,H,Q,dh), k/v (B,H,T,dh), mask broadcastable to (B,H,Q,T), True = may attend.
    ``keep`` (training only) receives the attention weights."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    w = torch.softmax(scores, dim=-1)
    if keep is not None:
        keep.append(w)
    return w @ v


class Front(nn.Module):
    """Two convolutions: 100 mel frames/s -> 25 (stride 4) or 50 (stride 2) encoder frames/s."""

    def __init__(self, n_mels: int, d: int, stride: int = 4):
        super().__init__()
        if stride not in (2, 4):
            raise ValueError(f"front-end stride {stride} is not 2 or 4")
        self.c1 = nn.Conv1d(n_mels, d, 3, stride=2, padding=1)
        self.c2 = nn.Conv1d(d, d, 3, stride=stride // 2, padding=1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:  # (B,T,n_mels) -> (B,S,d)
        x = F.gelu(self.c1(mel.transpose(1, 2)))
        x = F.gelu(self.c2(x))
        return x.transpose(1, 2)


def out_frames(mel_frames: torch.Tensor, stride: int) -> torch.Tensor:
    """Encoder frames for a number of mel frames (pad-1, kernel-3 convs of stride 2, then
    2 or 1)."""
    s = (mel_frames - 1) // 2 + 1
    return (s - 1) // 2 + 1 if stride == 4 else s


class EncLayer(nn.Module):
    def __init__(self, dm: Dims):
        super().__init__()
        self.h, self.dh = dm.heads, dm.d // dm.heads
        self.ln1, self.ln2 = nn.LayerNorm(dm.d), nn.LayerNorm(dm.d)
        self.qkv = nn.Linear(dm.d, 3 * dm.d)
        self.o = nn.Linear(dm.d, dm.d)
        self.mlp = nn.Sequential(nn.Linear(dm.d, dm.ffn), nn.GELU(), nn.Linear(dm.ffn, dm.d))
        self.conv = dm.conv_kernel > 0
        if self.conv:  # conformer-style local context: learns alignments far sooner
            self.ln_c = nn.LayerNorm(dm.d)
            self.dw = nn.Conv1d(
                dm.d, dm.d, dm.conv_kernel, padding=dm.conv_kernel // 2, groups=dm.d
            )
            self.pw = nn.Linear(dm.d, dm.d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, _ = x.shape
        if self.conv:
            h = self.ln_c(x)
            if mask is not None:  # keep padding out of the valid frames' convolution
                h = h * mask[:, 0, 0, :, None].to(h.dtype)
            x = x + self.pw(F.gelu(self.dw(h.transpose(1, 2)).transpose(1, 2)))
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        a = attention(q, k, v, mask).transpose(1, 2).reshape(b, s, -1)
        x = x + _drop(self.o(a), self.training)
        return x + _drop(self.mlp(self.ln2(x)), self.training)


class Encoder(nn.Module):
    def __init__(self, dm: Dims):
        super().__init__()
        self.d = dm.d
        self.stride = dm.stride
        self.front = Front(dm.n_mels, dm.d, dm.stride)
        self.layers = nn.ModuleList([EncLayer(dm) for _ in range(dm.enc_layers)])
        self.ln = nn.LayerNorm(dm.d)

    def forward(
        self, mel: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.front(mel)
        x = x + sinusoids(x.shape[1], self.d).to(x.dtype)
        mask = None
        if lengths is not None:
            s_len = out_frames(lengths, self.stride)
            mask = (torch.arange(x.shape[1])[None, :] < s_len[:, None])[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return self.ln(x), mask


class DecLayer(nn.Module):
    def __init__(self, dm: Dims):
        super().__init__()
        self.h, self.dh = dm.heads, dm.d // dm.heads
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(dm.d), nn.LayerNorm(dm.d), nn.LayerNorm(dm.d)
        self.qkv = nn.Linear(dm.d, 3 * dm.d)
        self.o = nn.Linear(dm.d, dm.d)
        self.cq = nn.Linear(dm.d, dm.d)
        self.ck = nn.Linear(dm.enc_d or dm.d, dm.d)
        self.cv = nn.Linear(dm.enc_d or dm.d, dm.d)
        self.co = nn.Linear(dm.d, dm.d)
        self.mlp = nn.Sequential(nn.Linear(dm.d, dm.ffn), nn.GELU(), nn.Linear(dm.ffn, dm.d))
        self.keep: list | None = (
            None  # training: collects cross-attention weights (guided-attention loss)
        )

    def cross_kv(self, enc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = enc.shape
        k = self.ck(enc).view(b, s, self.h, self.dh).transpose(1, 2)
        v = self.cv(enc).view(b, s, self.h, self.dh).transpose(1, 2)
        return k, v

    def forward(self, x, past_k, past_v, cross_k, cross_v, self_mask, cross_mask):
        b, n = (1, -1) if STATIC_BATCH else x.shape[:2]
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        width = self.h * self.dh
        x = x + _drop(
            self.o(attention(q, k, v, self_mask).transpose(1, 2).reshape(b, n, width)),
            self.training,
        )
        q = self.cq(self.ln2(x)).view(b, n, self.h, self.dh).transpose(1, 2)
        x = x + _drop(
            self.co(
                attention(q, cross_k, cross_v, cross_mask, self.keep)
                .transpose(1, 2)
                .reshape(b, n, width)
            ),
            self.training,
        )
        return x + _drop(self.mlp(self.ln3(x)), self.training), k, v


class Decoder(nn.Module):
    def __init__(self, dm: Dims):
        super().__init__()
        self.dm = dm
        self.emb = nn.Embedding(dm.vocab, dm.d)
        self.pos = nn.Parameter(torch.randn(dm.max_tokens, dm.d) * 0.02)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.layers = nn.ModuleList([DecLayer(dm) for _ in range(dm.dec_layers)])
        self.ln = nn.LayerNorm(dm.d)

    def cross_kv(self, enc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Stacked cross-attention K/V for all layers: (L,B,H,S,dh) each."""
        ks, vs = zip(*[layer.cross_kv(enc) for layer in self.layers])
        return torch.stack(ks), torch.stack(vs)

    def forward(self, tokens, past_k, past_v, cross_k, cross_v, cross_mask=None):
        """tokens (B,K); past (L,B,H,T,dh); returns logits (B,K,V) and present (L,B,H,T+K,dh).
        The caches and cross K/V may also be per-layer sequences of (B,H,T,dh) tensors (the
        ONNX decoder's form); the present caches are then returned per layer too."""
        h, pk, pv = self.states(tokens, past_k, past_v, cross_k, cross_v, cross_mask)
        return h @ self.emb.weight.T, pk, pv

    def states(self, tokens, past_k, past_v, cross_k, cross_v, cross_mask=None):
        """As :meth:`forward`, with the final (normalised) states (B,K,d) in place of the logits."""
        t0 = past_k[0].shape[2]
        n = tokens.shape[1]
        x = self.emb(tokens) + self.pos[t0 : t0 + n]
        qpos = torch.arange(n) + t0
        self_mask = torch.arange(t0 + n)[None, :] <= qpos[:, None]
        pk, pv = [], []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, past_k[i], past_v[i], cross_k[i], cross_v[i], self_mask, cross_mask)
            pk.append(k)
            pv.append(v)
        h = self.ln(x)
        if isinstance(past_k, (list, tuple)):
            return h, pk, pv
        return h, torch.stack(pk), torch.stack(pv)

    def empty_past(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        dm = self.dm
        z = torch.zeros(dm.dec_layers, batch, dm.heads, 0, dm.d // dm.heads)
        return z, z.clone()


class AheadHead(nn.Module):
    """The drafter's look-ahead head (train_ahead.py): from the decoder's final state at a
    position and the embedding of the greedy token it predicts there, the logits of the token
    after that one. A self-speculating drafter source checks each guess with its next forward,
    so the head changes the source's pace, not its choices."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.ln_e = nn.LayerNorm(d)
        self.f = nn.Sequential(nn.Linear(2 * d, hidden), nn.GELU(), nn.Linear(hidden, d))
        self.ln = nn.LayerNorm(d)

    def forward(self, h: torch.Tensor, nxt: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """h (B,K,d) decoder states, nxt (B,K) the greedy tokens there, emb the tied (V,d)."""
        z = torch.cat([h, self.ln_e(F.embedding(nxt, emb))], -1)
        return self.ln(h + self.f(z)) @ emb.T

    def macs(self, vocab: int) -> int:
        """Multiply-adds per position: its two linear layers and the tied output projection."""
        lin = [m for m in self.f if isinstance(m, nn.Linear)]
        return (
            sum(m.in_features * m.out_features for m in lin) + self.ln.normalized_shape[0] * vocab
        )


class Seq2Seq(nn.Module):
    def __init__(self, dm: Dims):
        super().__init__()
        self.dm = dm
        self.encoder = Encoder(dm.encoder_dims())
        self.decoder = Decoder(dm)
        self.ctc_head = nn.Linear(dm.enc_d or dm.d, dm.vocab)  # blank = pad id 0; training only
        self.frozen_encoder = False  # the shared-encoder drafter: the target's encoder, not trained
        self.last_enc: tuple[torch.Tensor, torch.Tensor | None] | None = None  # set when frozen

    def freeze_encoder(self) -> None:
        """The shared-encoder drafter's encoder (and its unused CTC head) never train: no
        gradient, no dropout; the optimiser holds only ``requires_grad`` parameters."""
        self.frozen_encoder = True
        for p in [*self.encoder.parameters(), *self.ctc_head.parameters()]:
            p.requires_grad_(False)

    @classmethod
    def from_saved(cls, saved: dict) -> Seq2Seq:
        """The model of a loaded training checkpoint (``torch.load`` of ckpt.pt), in eval mode."""
        model = cls(Dims(**saved["dims"]))
        model.load_state_dict(saved["model"])
        return model.eval()

    def forward(self, mel, mel_lengths, tokens, head_only_aux: bool = False):
        """``head_only_aux``: the auxiliary CTC trains its head alone (no gradient into the
        encoder), for a freshly initialised head on a trained encoder."""
        if self.frozen_encoder:
            self.encoder.eval()  # no dropout: the same encoder output the target computes
            with torch.no_grad():
                enc, mask = self.encoder(mel, mel_lengths)
            self.last_enc = (
                enc,
                mask,
            )  # train.py --teacher: the target's decoder reads the same encoding
        else:
            enc, mask = self.encoder(mel, mel_lengths)
        ck, cv = self.decoder.cross_kv(enc)
        pk, pv = self.decoder.empty_past(mel.shape[0])
        logits, _, _ = self.decoder(tokens, pk, pv, ck, cv, mask)
        return logits, self.ctc_head(enc.detach() if head_only_aux else enc)


class CtcModel(nn.Module):
    def __init__(self, dm: Dims, n_chars: int):
        super().__init__()
        self.dm = dm
        self.encoder = Encoder(dm)
        self.head = nn.Linear(dm.d, n_chars)

    def forward(self, mel, mel_lengths=None):
        enc, _ = self.encoder(mel, mel_lengths)
        return self.head(enc)
