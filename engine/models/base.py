"""The decoder-only causal LM every family is an instance of.

Module names follow Hugging Face's (model.embed_tokens, model.layers.N.self_attn.q_proj,
..., model.norm, lm_head) so checkpoint tensors map to parameters by name; `weight_sources`
lists, for each parameter, the checkpoint tensor(s) it is read from.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn

from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.model_config import ModelConfig
from engine.models.attention import SelfAttention
from engine.models.layers import GatedMLP, RMSNorm
from engine.models.moe import SparseMoE
from engine.models.rope import RotaryEmbedding

# (parameter name, checkpoint tensor name, index into the parameter or None for all of it)
WeightSource = tuple[str, str, Any]


def kv_cache_shape(config: ModelConfig, num_blocks: int, block_size: int) -> tuple[int, int, int, int]:
    """Shape of one layer's k_cache (and v_cache): [num_blocks, block_size, Hkv, D]."""
    return (num_blocks, block_size, config.num_kv_heads, config.head_dim)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.self_attn = SelfAttention(config)
        if config.is_moe_layer(layer):
            self.mlp = SparseMoE(config)
        else:
            self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_eps)

    def forward(self, x: torch.Tensor, cos_sin, backend, plan, kv_cache) -> torch.Tensor:  # [T, hidden]
        x = x + self.self_attn(self.input_layernorm(x), cos_sin, backend, plan, kv_cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)


class CausalLM(nn.Module):
    """forward() runs one engine step over the paged KV cache (engine/attention/metadata.py)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = DecoderModel(config)
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
                layer_additions: list | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids/positions [T] -> (final normed hidden [T, hidden], captured [T, hidden] | None).

        positions may be [3, T] (multimodal rope). inputs_embeds [T, hidden], when given,
        replaces the embedding of input_ids. layer_additions[i] = (rows [k] long, values
        [k, hidden]) is added to the output of layer i at those rows (the vision tower's
        deepstack features), after that output is captured, as transformers records it.

        captured follows HF's hidden_states[capture_layer]: 0 = the input embeddings, i = the
        output of decoder layer i-1, num_layers = the final normed hidden (as HF returns it).
        """
        num_layers = self.config.num_layers
        if capture_layer is not None and not 0 <= capture_layer <= num_layers:
            raise ValueError(f"capture_layer must be in 0..{num_layers}, got {capture_layer}")
        if len(kv_caches) != num_layers:
            raise ValueError(f"kv_caches has {len(kv_caches)} layers, the model {num_layers}")
        plan = self.attn_backend.prepare(meta)
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds  # [T, hidden]
        cos_sin = self.rotary.rotation(positions, x.dtype)
        captured = x if capture_layer == 0 else None
        additions = layer_additions or []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos_sin, self.attn_backend, plan, kv_caches[i])
            if capture_layer == i + 1 and capture_layer < num_layers:
                captured = x
            if i < len(additions) and additions[i][0].numel():
                rows, values = additions[i]
                x = x.index_put((rows,), x[rows] + values.to(x.dtype))  # a new tensor: captured keeps its own
        x = self.model.norm(x)
        if capture_layer == num_layers:
            captured = x
        return x, captured

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
