"""BAGEL's ViT side: a SigLIP vision tower in packed (NaViT) form, the connector to the
LLM width and the 2D sin-cos `vit_pos_embed`.

Input is any number of images of any size packed along one token axis:
    pixels        [N, patch * patch * C]  each patch flattened (row, col, channel), images
                                          one after another (preprocess.patchify)
    position_ids  [N]                     row * max_num_patch_per_side + col of each patch
    seq_lens      tokens per image (sum N)
Output [N, llm_hidden]: tower -> post-layernorm -> connector (fc1, act, fc2) -> +
vit_pos_embed[position_ids]. Attention stays within one image, so each image gets its
solo result whatever it is packed with.

Module names are the checkpoint's: a state dict under `vit_model.vision_model.*`,
`connector.*`, `vit_pos_embed.pos_embed` loads as is. The patch embedding is a linear
layer over the flattened patch (upstream converts SigLIP's conv to it before loading), and
the tower has the config's layers minus the dropped ones. Overridable defaults (the dropped
layer, the 70-patch grid, the connector's activation, rope off): see vit_config.py.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import InvalidArgument
from engine.models.bagel.sincos import PositionTable
from engine.models.bagel.vit_config import VitConfig
from engine.models.meta_device import meta_device


def activation(name: str):
    return (lambda x: F.gelu(x, approximate="tanh")) if name == "gelu_pytorch_tanh" else F.gelu


def segment_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:
    """q, k, v [N, H, Dh] -> [N, H, Dh], full attention within each segment of seq_lens.
    Equal lengths run as one batch; otherwise one call per segment (no padding, no N x N mask)."""
    if len(set(seq_lens)) == 1:
        b, n, heads = len(seq_lens), seq_lens[0], q.shape[1]
        q, k, v = (t.view(b, n, heads, -1).transpose(1, 2) for t in (q, k, v))  # [B, H, n, Dh]
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b * n, heads, -1)
    outs = []
    for qs, ks, vs in zip(q.split(list(seq_lens)), k.split(list(seq_lens)), v.split(list(seq_lens))):
        out = F.scaled_dot_product_attention(qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1))
        outs.append(out.transpose(0, 1))  # [n, H, Dh]
    return torch.cat(outs)


class SiglipAttention(nn.Module):
    def __init__(self, config: VitConfig):
        super().__init__()
        self.num_heads = config.num_heads
        width = config.hidden_size
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:  # [N, D] -> [N, D]
        n = x.shape[0]
        q, k, v = (proj(x).view(n, self.num_heads, -1) for proj in (self.q_proj, self.k_proj, self.v_proj))
        return self.out_proj(segment_attention(q, k, v, seq_lens).reshape(n, -1))


class Mlp(nn.Module):
    """fc1 -> act -> fc2: a tower layer's MLP (hidden -> intermediate -> hidden) and the
    connector (vit hidden -> llm hidden -> llm hidden)."""

    def __init__(self, width_in: int, width_mid: int, width_out: int, act: str):
        super().__init__()
        self.act = activation(act)
        self.fc1 = nn.Linear(width_in, width_mid)
        self.fc2 = nn.Linear(width_mid, width_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SiglipEncoderLayer(nn.Module):
    def __init__(self, config: VitConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.self_attn = SiglipAttention(config)
        self.layer_norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = Mlp(config.hidden_size, config.intermediate_size, config.hidden_size, config.hidden_act)

    def forward(self, x: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), seq_lens)
        return x + self.mlp(self.layer_norm2(x))


class SiglipEmbeddings(nn.Module):
    def __init__(self, config: VitConfig):
        super().__init__()
        self.patch_embedding = nn.Linear(config.patch_dim, config.hidden_size)
        self.position_embedding = nn.Embedding(config.patches_per_side ** 2, config.hidden_size)

    def forward(self, pixels: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.patch_embedding(pixels) + self.position_embedding(position_ids)


class SiglipEncoder(nn.Module):
    def __init__(self, config: VitConfig):
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(config) for _ in range(config.num_layers))


class SiglipVisionTransformer(nn.Module):
    def __init__(self, config: VitConfig):
        super().__init__()
        self.embeddings = SiglipEmbeddings(config)
        self.encoder = SiglipEncoder(config)
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, pixels: torch.Tensor, position_ids: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:
        x = self.embeddings(pixels, position_ids)  # [N, D]
        for layer in self.encoder.layers:
            x = layer(x, seq_lens)
        return self.post_layernorm(x)


class SiglipTower(nn.Module):
    """`vit_model`: the checkpoint nests the transformer one level down (`vision_model`)."""

    def __init__(self, config: VitConfig):
        super().__init__()
        self.vision_model = SiglipVisionTransformer(config)

    def forward(self, pixels: torch.Tensor, position_ids: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:
        return self.vision_model(pixels, position_ids, seq_lens)


class BagelVit(nn.Module):
    def __init__(self, config: VitConfig):
        super().__init__()
        self.config = config
        self.vit_model = SiglipTower(config)
        self.connector = Mlp(config.hidden_size, config.llm_hidden_size, config.llm_hidden_size, config.connector_act)
        self.vit_pos_embed = PositionTable(config.max_num_patch_per_side, config.llm_hidden_size)

    def check(self, pixels: torch.Tensor, position_ids: torch.Tensor, seq_lens: Sequence[int]) -> None:
        c, n = self.config, pixels.shape[0]
        if pixels.dim() != 2 or pixels.shape[1] != c.patch_dim:
            raise InvalidArgument(f"vit pixels: expected [N, {c.patch_dim}] flattened patches, got {list(pixels.shape)}")
        if position_ids.shape != (n,) or sum(seq_lens) != n or min(seq_lens, default=0) < 1:
            raise InvalidArgument(f"vit position_ids / seq_lens: {list(position_ids.shape)} ids and seq_lens "
                                  f"{list(seq_lens)} do not cover {n} patches")
        table = c.max_num_patch_per_side ** 2
        if n and not 0 <= int(position_ids.min()) <= int(position_ids.max()) < table:
            raise InvalidArgument(f"vit position_ids: ids must lie in [0, {table}) "
                                  f"(max_num_patch_per_side {c.max_num_patch_per_side})")

    @torch.no_grad()
    def forward(self, pixels: torch.Tensor, position_ids: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:
        """pixels [N, patch_dim], position_ids [N], seq_lens per image -> [N, llm_hidden]."""
        self.check(pixels, position_ids, seq_lens)
        weight = self.connector.fc1.weight
        pixels, position_ids = pixels.to(weight.device, weight.dtype), position_ids.to(weight.device)
        hidden = self.vit_model(pixels, position_ids, list(seq_lens))  # [N, vit_hidden]
        return self.connector(hidden) + self.vit_pos_embed(position_ids).to(weight.dtype)


def tiny_vit_state(vit_config: Mapping[str, Any], llm_hidden: int, generator: torch.Generator,
                   **overrides: Any) -> dict[str, torch.Tensor]:
    """Random fp32 tensors for every parameter of BagelVit under the checkpoint's keys
    (`vit_model.*`, `connector.*`, `vit_pos_embed.*`), for a SiglipVisionConfig-style dict.
    overrides: VitConfig.from_siglip's keywords (num_dropped_layers, max_num_patch_per_side, ...).
    Matrices are scaled by fan_in ** -0.5, norm weights around 1, biases and tables small."""
    config = VitConfig.from_siglip(vit_config, llm_hidden, **overrides)
    with meta_device():
        shapes = {name: t.shape for name, t in BagelVit(config).state_dict().items()}
    state = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=generator)
        if "norm" in name and name.endswith(".weight"):
            state[name] = 1 + 0.1 * noise
        elif len(shape) == 2:
            state[name] = noise * shape[1] ** -0.5
        else:
            state[name] = 0.1 * noise
    return state
