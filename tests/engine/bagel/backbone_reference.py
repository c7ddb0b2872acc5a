"""Random BAGEL backbones of a few configs, and what the backbone should compute, written
out plainly over the checkpoint's tensors by their upstream ema names (not through the
engine's modules), from what upstream's Bagel / Qwen2 MoT inference does:

- a packed sequence is a list of segments; a row's expert is the generation expert
  (`*_moe_gen` tensors) for VAE latent tokens, the understanding expert otherwise (text,
  the start/end-of-image markers, ViT tokens);
- rope positions: a text token takes one position each; an image (its start marker, all
  its ViT or VAE tokens, its end marker) takes one position; the next input starts one later;
- attention: text is causal; the rows of one image (markers included) attend to each
  other both ways and to everything before them; every row attends to all earlier rows;
- per layer: each row through its own expert's input norm and q/k/v (with bias), per-head
  q/k RMSNorm, rope, one attention over all rows, its own expert's o_proj (no bias), a
  residual, its own post-attention norm and MLP, a residual; at the end its own final
  norm (`norm` / `norm_moe_gen`); text leaves through lm_head, latents through llm2vae;
- a latent token enters as vae2llm(patch) + timestep embedding (256 sinusoid
  frequencies, cos half then sin, max period 10000, then Linear-SiLU-Linear) +
  latent_pos_embed.pos_embed[row * max_latent_size + col].
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from engine.models.bagel.config import BagelConfig, BagelDefaults, llm_model_config
from engine.models.bagel.loader import build_backbone
from engine.models.bagel.tiny import TinyBagelSpec, llm_config, random_backbone_state

# Two configs: sizes, heads / kv heads, rope theta and eps all differ.
SPECS = {
    "a": TinyBagelSpec(),
    "b": TinyBagelSpec(hidden_size=72, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
                       num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5, vocab_size=300),
}


def backbone_case(name: str, seed: int = 0):
    """(BagelLM with random weights, its ema state dict by upstream names, the llm_config dict)."""
    spec = SPECS[name]
    llm = llm_config(spec)
    config = BagelConfig(llm=llm_model_config(llm, BagelDefaults()))
    state = random_backbone_state(config, torch.Generator().manual_seed(seed))
    model = build_backbone(config)
    from engine.models.bagel.backbone import checkpoint_name

    with torch.no_grad():
        for param_name, param in model.named_parameters():
            param.copy_(state[checkpoint_name(param_name)])
    return model, state, llm


@dataclass
class Packed:
    """One sequence's rows: input embeddings, expert (0/1), rope position, segment (0 = causal)."""
    embeds: list = field(default_factory=list)
    experts: list = field(default_factory=list)
    positions: list = field(default_factory=list)
    segments: list = field(default_factory=list)

    def add(self, embeds: torch.Tensor, experts: list[int], positions: list[int], segment: int) -> None:
        self.embeds.append(embeds)
        self.experts += experts
        self.positions += positions
        self.segments += [segment] * len(experts)

    def tensors(self):
        return (torch.cat(self.embeds), torch.tensor(self.experts), torch.tensor(self.positions),
                torch.tensor(self.segments))


def timestep_embedding(state: dict, t: float, n: int) -> torch.Tensor:
    half = 128
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = torch.full((n, 1), t, dtype=torch.float32) * freqs[None]
    x = torch.cat([angles.cos(), angles.sin()], dim=-1)
    x = F.linear(x, state["time_embedder.mlp.0.weight"], state["time_embedder.mlp.0.bias"])
    return F.linear(F.silu(x), state["time_embedder.mlp.2.weight"], state["time_embedder.mlp.2.bias"])


def latent_embeds(state: dict, patches: torch.Tensor, t: float, rows: int, cols: int, grid: int) -> torch.Tensor:
    ids = torch.tensor([r * grid + c for r in range(rows) for c in range(cols)])
    return (F.linear(patches, state["vae2llm.weight"], state["vae2llm.bias"]) + timestep_embedding(state, t, len(ids))
            + state["latent_pos_embed.pos_embed"][ids])


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    angles = positions[:, None].float() * inv_freq[None]
    emb = torch.cat((angles, angles), -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    return x * cos + torch.cat((-x[..., dim // 2:], x[..., :dim // 2]), -1) * sin


def _mask(segments: torch.Tensor) -> torch.Tensor:
    n = segments.numel()
    causal = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
    return causal | ((segments[:, None] == segments[None, :]) & (segments[:, None] != 0))


@torch.no_grad()
def reference_hidden(state: dict, llm: dict, packed: Packed) -> torch.Tensor:
    """The whole sequence's final normed hidden [N, hidden], each row by its expert."""
    x, experts, positions, segments = packed.tensors()
    n, heads, kv_heads = x.shape[0], llm["num_attention_heads"], llm["num_key_value_heads"]
    head_dim, eps = llm["hidden_size"] // heads, llm["rms_norm_eps"]
    gen = experts == 1

    def pick(fn):  # each row computed by its own expert's tensors
        und, moe = fn(""), fn("_moe_gen")
        return torch.where(gen.view(-1, *([1] * (und.dim() - 1))), moe, und)

    mask = _mask(segments)
    for layer in range(llm["num_hidden_layers"]):
        w = lambda name: state[f"language_model.model.layers.{layer}.{name}"]  # noqa: E731
        h = pick(lambda s: _rms(x, w(f"input_layernorm{s}.weight"), eps))

        def proj(s, name, count):
            out = F.linear(h, w(f"self_attn.{name}_proj{s}.weight"), w(f"self_attn.{name}_proj{s}.bias"))
            return out.view(n, count, head_dim)

        q = pick(lambda s: _rms(proj(s, "q", heads), w(f"self_attn.q_norm{s}.weight"), eps))
        k = pick(lambda s: _rms(proj(s, "k", kv_heads), w(f"self_attn.k_norm{s}.weight"), eps))
        v = pick(lambda s: proj(s, "v", kv_heads))
        q, k = _rope(q, positions, llm["rope_theta"]), _rope(k, positions, llm["rope_theta"])
        group = heads // kv_heads
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.repeat_interleave(group, 1).transpose(0, 1),
                                              v.repeat_interleave(group, 1).transpose(0, 1), attn_mask=mask)
        attn = attn.transpose(0, 1).reshape(n, heads * head_dim)
        x = x + pick(lambda s: F.linear(attn, w(f"self_attn.o_proj{s}.weight")))

        def mlp(s):
            y = _rms(x, w(f"post_attention_layernorm{s}.weight"), eps)
            gate = F.linear(y, w(f"mlp{s}.gate_proj.weight"))
            return F.linear(F.silu(gate) * F.linear(y, w(f"mlp{s}.up_proj.weight")), w(f"mlp{s}.down_proj.weight"))

        x = x + pick(mlp)
    return pick(lambda s: _rms(x, state[f"language_model.model.norm{s}.weight"], eps))


def velocity(state: dict, hidden: torch.Tensor) -> torch.Tensor:
    return F.linear(hidden, state["llm2vae.weight"], state["llm2vae.bias"])
