"""The V-JEPA 2-AC predictor: a transformer over per-timestep token groups
[action, state, (extrinsics), grid_height x grid_width patches], block-causal in time.

Module names follow the upstream VisionTransformerPredictorAC state dict
(`predictor_embed`, `action_encoder`, `state_encoder`, `extrinsics_encoder`,
`predictor_blocks.{i}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}`,
`predictor_norm`, `predictor_proj`), so that layout loads without renaming.

Every patch token is rotated by (timestep, row, column) with the 3D rotary embedding;
action/state tokens only on the time axis (their row/column channels see position 0,
which is the identity). Timestep t attends to every token of timesteps 0..t, so no
earlier timestep's keys or values ever change: the KV-cached rollout (engine/models/vjepa2_ac)
relies on exactly that. The attention itself is injected (`attend`), so the same blocks
serve the full block-causal pass here and the paged-cache pass there.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.vjepa2_ac.config import PredictorConfig
from engine.models.vjepa2_ac.rope import rope_table, rotate

# attend(layer, q, k, v) -> out, each [B, heads, N, head_dim]
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class ACAttention(nn.Module):
    def __init__(self, cfg: PredictorConfig) -> None:
        super().__init__()
        d = cfg.predictor_embed_dim
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(x).unflatten(-1, (3, self.num_heads, -1)).permute(2, 0, 3, 1, 4)  # [3, B, heads, N, hd]
        q, k = rotate(qkv[0], cos, sin), rotate(qkv[1], cos, sin)
        out = attend(q, k, qkv[2])
        return self.proj(out.transpose(1, 2).reshape(b, n, -1))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class ACBlock(nn.Module):
    def __init__(self, cfg: PredictorConfig) -> None:
        super().__init__()
        d = cfg.predictor_embed_dim
        self.norm1 = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.attn = ACAttention(cfg)
        self.norm2 = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.mlp = Mlp(d, int(d * cfg.mlp_ratio))

    def forward(self, x, cos, sin, attend) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, attend)
        return x + self.mlp(self.norm2(x))


def block_causal_mask(num_steps: int, tokens_per_step: int) -> torch.Tensor:
    """[N, N] bool, N = num_steps * tokens_per_step: True where a query may attend."""
    step = torch.arange(num_steps * tokens_per_step) // tokens_per_step
    return step[None, :] <= step[:, None]


class ACPredictor(nn.Module):
    def __init__(self, cfg: PredictorConfig) -> None:
        super().__init__()
        self.config = cfg
        d, a = cfg.predictor_embed_dim, cfg.action_embed_dim
        self.predictor_embed = nn.Linear(cfg.embed_dim, d)
        self.action_encoder = nn.Linear(a, d)
        self.state_encoder = nn.Linear(a, d)
        self.extrinsics_encoder = nn.Linear(a - 1, d) if a > 1 else None
        self.predictor_blocks = nn.ModuleList(ACBlock(cfg) for _ in range(cfg.depth))
        self.predictor_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.predictor_proj = nn.Linear(d, cfg.embed_dim)
        cos, sin = self._rope_tables()
        self.register_buffer("rope_cos", cos, persistent=False)  # [max_timesteps, S, head_dim]
        self.register_buffer("rope_sin", sin, persistent=False)

    def _rope_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.config
        k, hw = cfg.num_cond_tokens, cfg.num_patches
        ids = torch.arange(hw)
        rows = torch.cat([torch.zeros(k), (ids // cfg.grid_width).float()])
        # the reference snaps columns onto the row grid (grid_height / grid_width)
        cols = torch.cat([torch.zeros(k), (ids % cfg.grid_width).float() * (cfg.grid_height / cfg.grid_width)])
        tables = [rope_table(torch.full((k + hw,), float(t)), rows, cols, cfg.head_dim)
                  for t in range(cfg.max_timesteps)]
        return torch.stack([c for c, _ in tables]), torch.stack([s for _, s in tables])

    def embed(self, feats: torch.Tensor, actions: torch.Tensor, states: torch.Tensor,
              extrinsics: torch.Tensor | None = None) -> torch.Tensor:
        """feats [B, T, HW, embed_dim], actions/states [B, T, A] -> tokens [B, T, S, D]."""
        cond = [self.action_encoder(actions), self.state_encoder(states)]
        if self.config.use_extrinsics:
            cond.append(self.extrinsics_encoder(extrinsics))
        return torch.cat([torch.stack(cond, dim=2), self.predictor_embed(feats)], dim=2)

    def rope(self, first_steps: torch.Tensor, num_steps: int, dtype: torch.dtype):
        """first_steps [B] (long) -> (cos, sin) [B, 1, num_steps * S, head_dim] for timesteps
        first_steps[b] .. first_steps[b] + num_steps - 1."""
        idx = first_steps[:, None] + torch.arange(num_steps, device=first_steps.device)  # [B, n]
        cos, sin = self.rope_cos[idx].flatten(1, 2), self.rope_sin[idx].flatten(1, 2)
        return cos[:, None].to(dtype), sin[:, None].to(dtype)

    def layers(self, x: torch.Tensor, cos, sin, attend: Attend) -> torch.Tensor:
        """x [B, N, D] through every block; attend(layer, q, k, v)."""
        for i, block in enumerate(self.predictor_blocks):
            x = block(x, cos, sin, lambda q, k, v, i=i: attend(i, q, k, v))
        return x

    def head(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, n, S, D] -> predicted features of the next timesteps [B, n, HW, embed_dim]."""
        return self.predictor_proj(self.predictor_norm(tokens[:, :, self.config.num_cond_tokens:]))

    def forward(self, x: torch.Tensor, actions: torch.Tensor, states: torch.Tensor,
                extrinsics: torch.Tensor | None = None) -> torch.Tensor:
        """The full block-causal pass over T timesteps (the reference's forward):
        x [B, T*HW, embed_dim], actions/states [B, T, A] -> [B, T*HW, embed_dim], where
        timestep t's output predicts timestep t+1's features."""
        cfg = self.config
        b, t = actions.shape[:2]
        tokens = self.embed(x.view(b, t, cfg.num_patches, -1), actions, states, extrinsics)  # [B, T, S, D]
        cos, sin = self.rope(torch.zeros(b, dtype=torch.long, device=x.device), t, tokens.dtype)
        mask = block_causal_mask(t, cfg.tokens_per_step).to(x.device)

        def attend(_layer, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        out = self.layers(tokens.flatten(1, 2), cos, sin, attend).view(b, t, cfg.tokens_per_step, -1)
        return self.head(out).flatten(1, 2)
