"""The torch modules the audio-LLM fixtures' ONNX graphs are exported from
(training/audio_llm_fixtures.py imports this file only in the stages that need torch).

* AudioEncoder: qwen2_audio's audio tower + projector over the valid frames only.
* VoxtralAudioEncoder: voxtral's audio tower, 4 frames stacked, projector.
* EmbedTokens: the LLM's token embeddings.
* Decoder: the text model + lm_head with a flat key/value cache (decoder_model_merged).
"""

from __future__ import annotations

import torch
from torch import nn


class AudioEncoder(nn.Module):
    """input_features (1, n_mels, 3000) + feature_attention_mask (1, 3000) -> the projected
    audio embeddings of the valid frames only, (N, hidden), N from the mask as the
    processor counts <|AUDIO|> tokens. The encoder attends over the padded 1500 positions
    with the padding keys masked, exactly as Qwen2AudioModel builds its mask."""

    def __init__(self, model):
        super().__init__()
        self.tower = model.model.audio_tower
        self.proj = model.model.multi_modal_projector

    def forward(self, input_features, feature_attention_mask):
        tw = self.tower
        lengths = feature_attention_mask.sum(-1)  # (1,)
        conv_len = torch.div(lengths - 1, 2, rounding_mode="floor") + 1
        n_out = torch.div(conv_len - 2, 2, rounding_mode="floor") + 1
        h = nn.functional.gelu(tw.conv1(input_features))
        h = nn.functional.gelu(tw.conv2(h))
        h = h.permute(0, 2, 1) + tw.embed_positions.weight
        pos = torch.arange(h.shape[1], device=h.device)
        valid = pos[None, :] < conv_len[:, None]  # (1, 1500)
        zero, lowest = torch.tensor(0.0), torch.tensor(torch.finfo(torch.float32).min)
        mask = torch.where(valid, zero, lowest)[:, None, None, :]
        for layer in tw.layers:
            h = layer(h, mask)
        h = tw.avg_pooler(h.permute(0, 2, 1)).permute(0, 2, 1)
        h = tw.layer_norm(h)
        h = self.proj(h)[0]  # (750, hidden)
        keep = torch.arange(h.shape[0], device=h.device) < n_out[0]
        return h[keep]


class EmbedTokens(nn.Module):
    """input_ids -> inputs_embeds: the LLM's token embedding table."""

    def __init__(self, model):
        super().__init__()
        self.embed = model.get_input_embeddings()

    def forward(self, input_ids):
        return self.embed(input_ids)


class Decoder(nn.Module):
    """The text model + lm_head with a flat key/value cache, written out (RMSNorm, rotary
    embeddings, grouped-query attention, SiLU MLP) from the same weights as transformers'
    Qwen2/Llama so that the merged graph serves prefill and cached calls alike."""

    def __init__(self, model, text_cfg):
        super().__init__()
        lm = model.model.language_model
        self.layers = lm.layers
        self.norm = lm.norm
        self.lm_head = model.lm_head
        self.n_heads = text_cfg.num_attention_heads
        self.n_kv = text_cfg.num_key_value_heads
        self.head_dim = getattr(text_cfg, "head_dim", None) or (
            text_cfg.hidden_size // text_cfg.num_attention_heads
        )
        self.register_buffer("inv_freq", lm.rotary_emb.inv_freq.clone(), persistent=False)
        self.attn_scaling = float(lm.rotary_emb.attention_scaling)

    @staticmethod
    def rms(norm, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return norm.weight * (x * torch.rsqrt(var + norm.variance_epsilon))

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, inputs_embeds, attention_mask, position_ids, *past):
        b, s, _ = inputs_embeds.shape
        total = attention_mask.shape[1]
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attn_scaling)[:, None]
        sin = (emb.sin() * self.attn_scaling)[:, None]
        q_pos = torch.arange(s) + (total - s)
        k_pos = torch.arange(total)
        allowed = (k_pos[None, :] <= q_pos[:, None])[None, None] & (
            attention_mask[:, None, None, :] > 0
        )
        mask = torch.where(allowed, torch.tensor(0.0), torch.tensor(torch.finfo(torch.float32).min))
        h = inputs_embeds
        presents = []
        rep = self.n_heads // self.n_kv
        for i, layer in enumerate(self.layers):
            at = layer.self_attn
            x = self.rms(layer.input_layernorm, h)
            q = at.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
            k = at.k_proj(x).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
            v = at.v_proj(x).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            k = torch.cat([past[2 * i], k], dim=2)
            v = torch.cat([past[2 * i + 1], v], dim=2)
            presents += [k, v]
            if rep > 1:
                kk = k[:, :, None].expand(b, self.n_kv, rep, total, self.head_dim)
                kk = kk.reshape(b, self.n_heads, total, self.head_dim)
                vv = v[:, :, None].expand(b, self.n_kv, rep, total, self.head_dim)
                vv = vv.reshape(b, self.n_heads, total, self.head_dim)
            else:
                kk, vv = k, v
            w = torch.matmul(q, kk.transpose(2, 3)) * at.scaling + mask
            w = torch.softmax(w, dim=-1)
            a = torch.matmul(w, vv).transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim)
            h = h + at.o_proj(a)
            x = self.rms(layer.post_attention_layernorm, h)
            mlp = layer.mlp
            h = h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        h = self.rms(self.norm, h)
        return (self.lm_head(h), *presents)


class VoxtralAudioEncoder(nn.Module):
    """input_features (1, 128, 3000) -> (375, hidden): Whisper-style encoder over the
    30 s chunk (no mask), 4 consecutive frames stacked, projector (Linear-GELU-Linear)."""

    def __init__(self, model):
        super().__init__()
        self.tower = model.model.audio_tower
        self.proj = model.model.multi_modal_projector
        self.stack = model.config.audio_config.intermediate_size

    def forward(self, input_features):
        tw = self.tower
        h = nn.functional.gelu(tw.conv1(input_features))
        h = nn.functional.gelu(tw.conv2(h))
        h = h.permute(0, 2, 1) + tw.embed_positions.weight
        for layer in tw.layers:
            h = layer(h, attention_mask=None)
        h = tw.layer_norm(h)
        return self.proj(h.reshape(-1, self.stack))
