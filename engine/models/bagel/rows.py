"""The rows BAGEL puts into a context or a denoising query (kv_contexts.Rows).

- text: `<|im_start|>` + ids + `<|im_end|>` (framed by the caller), one rope position per
  token, causal, understanding expert;
- an image: start marker, its tokens, end marker, all at one rope position, one
  bidirectional segment; ViT tokens through the understanding expert, VAE latent tokens
  through the generation expert (the markers through the understanding expert);
- a denoising query: an image of noisy latents at the context's rope position, read
  without being stored.
Each builder takes the context's rope position and returns (rows, next rope position).
"""
from __future__ import annotations

import torch

from engine.models.bagel import GENERATION, UNDERSTANDING
from engine.models.bagel.kv_contexts import Rows

IMAGE_SEGMENT = 1  # segment ids are local to one step: one image per step


def text_rows(model, ids: list[int], rope: int) -> tuple[Rows, int]:
    n = len(ids)
    embeds = model.embed(torch.tensor(ids, dtype=torch.int64, device=model.model.embed_tokens.weight.device))
    return Rows(embeds, [UNDERSTANDING] * n, list(range(rope, rope + n)), [0] * n), rope + n


def image_rows(model, markers: tuple[int, int], tokens: torch.Tensor, expert: int, rope: int) -> tuple[Rows, int]:
    """tokens [n, hidden] between the start and end markers -> n + 2 rows at `rope`."""
    weight = model.model.embed_tokens.weight
    start, end = model.embed(torch.tensor(markers, dtype=torch.int64, device=weight.device))
    embeds = torch.cat([start[None], tokens.to(weight.device, weight.dtype), end[None]])
    n = len(tokens)
    experts = [UNDERSTANDING] + [expert] * n + [UNDERSTANDING]
    return Rows(embeds, experts, [rope] * (n + 2), [IMAGE_SEGMENT] * (n + 2)), rope + 1


def latent_tokens(model, patches: torch.Tensor, t: float | torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """patches [N, p*p*C] at flow time t (0 = clean) -> the backbone's input rows [N, hidden]."""
    io = model.latent_io
    device = io.vae2llm.weight.device
    timesteps = torch.as_tensor(t, dtype=torch.float32).reshape(1).expand(len(patches)).to(device)
    return io.embed(patches.to(device), timesteps, position_ids.to(device))


def vit_rows(model, markers, vit_tokens: torch.Tensor, rope: int) -> tuple[Rows, int]:
    return image_rows(model, markers, vit_tokens, UNDERSTANDING, rope)


def vae_rows(model, markers, patches: torch.Tensor, position_ids: torch.Tensor, rope: int) -> tuple[Rows, int]:
    """A clean image's latent patches [N, p*p*C] (t = 0) put into a context."""
    return image_rows(model, markers, latent_tokens(model, patches, 0.0, position_ids), GENERATION, rope)


def query_rows(model, markers, patches: torch.Tensor, t: torch.Tensor, position_ids: torch.Tensor,
               rope: int) -> Rows:
    """Noisy latents [N, p*p*C] at flow time t, queried over a context whose next rope is `rope`."""
    rows, _ = image_rows(model, markers, latent_tokens(model, patches, t, position_ids), GENERATION, rope)
    return rows
