"""A tiny two-expert decoder (BAGEL-like: Qwen2-style biases, q/k norms), random weights,
and what it should compute, written out plainly: every token through its own expert's
norms and projections, one attention over the whole sequence (torch SDPA, an explicit
causal + segment mask), every token through its own expert's o_proj and MLP."""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from engine.model_config import ModelConfig
from engine.models.base import CausalLM

VOCAB = 64


class TwoExpertLM(CausalLM):
    num_layer_experts = 2


def tiny_config(**overrides) -> ModelConfig:
    base = dict(family="qwen3", vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                num_kv_heads=2, head_dim=8, rope_theta=1e4, rms_eps=1e-6, tie_word_embeddings=False,
                max_position=256, qk_norm=True, attention_bias=True)
    return ModelConfig(**{**base, **overrides})


def random_model(cls=TwoExpertLM, seed: int = 0, **overrides) -> CausalLM:
    """Random weights everywhere: norms' affine weights around 1, the rest around 0."""
    model = cls(tiny_config(**overrides)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.3 * noise if "norm" in name else 0.2 * noise)
    return model


# -- the plain reference -------------------------------------------------------------

def _rms(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, positions, theta):
    """x [N, heads, D], HF's rotate-half convention."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
    angles = positions[:, None].float() * inv_freq[None]  # [N, D/2]
    cos, sin = torch.cat((angles, angles), -1).cos()[:, None], torch.cat((angles, angles), -1).sin()[:, None]
    rotated = torch.cat((-x[..., dim // 2:], x[..., :dim // 2]), -1)
    return x * cos + rotated * sin


def _mlp(mlp, x):
    return mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))


def allowed_mask(segments: list[int]) -> torch.Tensor:
    """[N, N] over one whole sequence: causal, plus both ways within a non-zero segment."""
    seg = torch.tensor(segments)
    n = len(segments)
    causal = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
    return causal | ((seg[:, None] == seg[None, :]) & (seg[:, None] != 0))


@torch.no_grad()
def reference_hidden(model: CausalLM, ids: list[int], experts: list[int], segments: list[int]) -> torch.Tensor:
    """One whole sequence -> final normed hidden [N, hidden]."""
    c = model.config
    n = len(ids)
    pick = torch.tensor(experts)

    def per_token(fn):  # every expert on every token, then each token keeps its own expert's row
        outs = torch.stack([fn(layer.expert(e)) for e in range(model.num_layer_experts)])  # [E, N, ...]
        return outs[pick, torch.arange(n)]

    x = model.model.embed_tokens.weight[torch.tensor(ids)]  # [N, hidden]
    positions = torch.arange(n)
    mask = allowed_mask(segments)
    for layer in model.model.layers:
        h = per_token(lambda e: _rms(x, e.input_layernorm.weight, c.rms_eps))
        q = per_token(lambda e: _rms(e.self_attn.q_proj(h).view(n, c.num_heads, c.head_dim),
                                     e.self_attn.q_norm.weight, c.rms_eps))
        k = per_token(lambda e: _rms(e.self_attn.k_proj(h).view(n, c.num_kv_heads, c.head_dim),
                                     e.self_attn.k_norm.weight, c.rms_eps))
        v = per_token(lambda e: e.self_attn.v_proj(h).view(n, c.num_kv_heads, c.head_dim))
        q, k = _rope(q, positions, c.rope_theta), _rope(k, positions, c.rope_theta)
        group = c.num_heads // c.num_kv_heads
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.repeat_interleave(group, 1).transpose(0, 1),
                                              v.repeat_interleave(group, 1).transpose(0, 1), attn_mask=mask)
        attn = attn.transpose(0, 1).reshape(n, -1)  # [N, H * D]
        x = x + per_token(lambda e: e.self_attn.o_proj(attn))
        x = x + per_token(lambda e: _mlp(e.mlp, _rms(x, e.post_attention_layernorm.weight, c.rms_eps)))
    return _rms(x, model.model.norm.weight, c.rms_eps)


# -- steps over the paged test driver -----------------------------------------------

def feature_step(driver, chunks, writes=None, segments=None):
    """driver.metadata for chunks [(seq, ids)], with per-sequence writes and per-sequence
    segment id lists; a sequence that does not store stays at its length (slots -1)."""
    lens = dict(driver.lens)
    input_ids, positions, meta = driver.metadata(chunks)
    extra = {}
    if writes is not None:
        for (seq, _), write in zip(chunks, writes):
            if not write:
                driver.lens[seq] = lens.get(seq, 0)
        row_writes = torch.repeat_interleave(torch.tensor(writes), torch.tensor([len(t) for _, t in chunks]))
        extra.update(write_kv=torch.tensor(writes), slot_mapping=torch.where(row_writes, meta.slot_mapping, -1))
    if segments is not None:
        extra["segment_ids"] = torch.tensor([s for per_seq in segments for s in per_seq], dtype=torch.int32)
    return input_ids, positions, dataclasses.replace(meta, **extra) if extra else meta


def share_prefix(driver, source: int, branch: int) -> None:
    """branch reads source's blocks and length (a fork that never writes them)."""
    driver.blocks[branch] = list(driver.blocks[source])
    driver.lens[branch] = driver.lens[source]
