"""The decoder-only causal LM every family is an instance of.

Module names follow Hugging Face's (model.embed_tokens, model.layers.N.self_attn.q_proj,
..., model.norm, lm_head) so checkpoint tensors map to parameters by name; `weight_sources`
lists, for each parameter, the checkpoint tensor(s) it is read from.

Per-token experts: a family with `num_layer_experts` > 1 holds that many parameter sets
per layer (engine/models/experts.py); forward's `expert_ids` [T] picks one per token.
Families with one expert (every one today) never pass it, and run unchanged.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.model_config import ModelConfig
from engine.models.experts import LayerExpert, TokenExperts, experts_forward, route_tokens
from engine.models.layers import RMSNorm
from engine.models.rope import RotaryEmbedding

# (parameter name, checkpoint tensor name, index into the parameter or None for all of it)
WeightSource = tuple[str, str, Any]


def kv_cache_shape(config: ModelConfig, num_blocks: int, block_size: int) -> tuple[int, int, int, int]:
    """Shape of one layer's k_cache (and v_cache): [num_blocks, block_size, Hkv, D]."""
    return (num_blocks, block_size, config.num_kv_heads, config.head_dim)


class DecoderLayer(LayerExpert):
    """Expert 0's modules under HF's names (self_attn, mlp, input_layernorm,
    post_attention_layernorm); experts 1.. in `extra_experts` (None with one expert)."""

    def __init__(self, config: ModelConfig, layer: int, num_experts: int = 1):
        super().__init__(config, layer)
        self.extra_experts = nn.ModuleList(
            LayerExpert(config, layer) for _ in range(num_experts - 1)) if num_experts > 1 else None

    def expert(self, e: int) -> LayerExpert:
        return self if e == 0 else self.extra_experts[e - 1]

    def forward(self, x: torch.Tensor, cos_sin, backend, plan, kv_cache,
                experts: TokenExperts | None = None) -> torch.Tensor:  # [T, hidden]
        if experts is not None:
            return experts_forward(self, x, cos_sin, backend, plan, kv_cache, experts)
        x = x + self.self_attn(self.input_layernorm(x), cos_sin, backend, plan, kv_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    def __init__(self, config: ModelConfig, num_layer_experts: int = 1):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i, num_layer_experts) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)


class CausalLM(nn.Module):
    """forward() runs one engine step over the paged KV cache (engine/attention/metadata.py)."""

    num_layer_experts = 1  # parameter sets per decoder layer (a family with per-token experts sets more)

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = DecoderModel(config, self.num_layer_experts)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(config)
        self.attn_backend: Any = TorchAttentionBackend()

    def set_attention_backend(self, backend: Any) -> None:
        """TorchAttentionBackend (default) or FlashInferBackend: prepare(meta), forward(...)."""
        self.attn_backend = backend

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [T, hidden]
        return self.model.embed_tokens(input_ids)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                capture_layer: int | None = None,
                inputs_embeds: torch.Tensor | None = None,
                layer_additions: list | None = None,
                expert_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids/positions [T] -> (final normed hidden [T, hidden], captured [T, hidden] | None).

        positions may be [3, T] (multimodal rope). inputs_embeds [T, hidden], when given,
        replaces the embedding of input_ids. layer_additions[i] = (rows [k] long, values
        [k, hidden]) is added to the output of layer i at those rows (the vision tower's
        deepstack features), after that output is captured, as transformers records it.

        captured follows HF's hidden_states[capture_layer]: 0 = the input embeddings, i = the
        output of decoder layer i-1, num_layers = the final normed hidden (as HF returns it).

        expert_ids int [T]: the layer expert of each token (None: expert 0 for all).
        """
        num_layers = self.config.num_layers
        if capture_layer is not None and not 0 <= capture_layer <= num_layers:
            raise ValueError(f"capture_layer must be in 0..{num_layers}, got {capture_layer}")
        if len(kv_caches) != num_layers:
            raise ValueError(f"kv_caches has {len(kv_caches)} layers, the model {num_layers}")
        plan = self.attn_backend.prepare(meta)
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds  # [T, hidden]
        experts = None if expert_ids is None else route_tokens(expert_ids, self.num_layer_experts, x.shape[0])
        cos_sin = self.rotary.rotation(positions, x.dtype)
        captured = x if capture_layer == 0 else None
        additions = layer_additions or []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos_sin, self.attn_backend, plan, kv_caches[i], experts)
            if capture_layer == i + 1 and capture_layer < num_layers:
                captured = x
            if i < len(additions) and additions[i][0].numel():
                rows, values = additions[i]
                x = x.index_put((rows,), x[rows] + values.to(x.dtype))  # a new tensor: captured keeps its own
        x = self.final_norm(x, experts)
        if capture_layer == num_layers:
            captured = x
        return x, captured

    def final_norm(self, x: torch.Tensor, experts: TokenExperts | None) -> torch.Tensor:
        """x [T, hidden] after the last layer -> normed (a family with a norm per expert overrides it)."""
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, vocab] fp32
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        with torch.no_grad():
            return nn.functional.linear(hidden, weight).float()

    def weight_sources(self, has_tensor) -> Iterator[WeightSource]:
        """Where every parameter comes from; `has_tensor(name)` says what the checkpoint holds."""
        prefix = self.config.weight_prefix
        for name, param in self.named_parameters():
            if ".mlp.experts." in name:
                yield from self._expert_sources(name, param, has_tensor)
            else:
                yield name, prefix + name, None

    def _expert_sources(self, name: str, param: torch.Tensor, has_tensor) -> Iterator[WeightSource]:
        """Stacked experts from per-expert HF tensors (or an already stacked tensor)."""
        ckpt = self.config.weight_prefix + name
        if has_tensor(ckpt):
            yield name, ckpt, None
            return
        base = ckpt.rsplit(".", 1)[0]  # ...mlp.experts
        half = param.shape[1] // 2
        for e in range(param.shape[0]):
            if name.endswith("gate_up_proj"):
                yield name, f"{base}.{e}.gate_proj.weight", (e, slice(0, half))
                yield name, f"{base}.{e}.up_proj.weight", (e, slice(half, 2 * half))
            else:
                yield name, f"{base}.{e}.down_proj.weight", e
