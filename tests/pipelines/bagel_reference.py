"""Upstream BAGEL's interleaved inference, written out plainly over a checkpoint's tensors:
the way its inferencer and its generate_image loop run, without paging or sharing.

A context is the list of every row it holds (input embedding, expert, rope position,
segment) and its next rope position; "copying" one copies the lists. Each forward
recomputes the whole sequence with a dense mask (tests/engine/bagel/backbone_reference.py:
text causal, an image's rows and a query's rows bidirectional among themselves, all rows
attending to everything before), which gives the rows the K/V cache upstream keeps would.

- a text input: im_start + ids + im_end, one rope position each, into gen and cfg_img;
  cfg_text becomes a copy of gen as it was before it;
- an image: resized by the VAE rule; with an image wanted, its VAE latent tokens (t = 0)
  as one image, then its ViT tokens as another, each one rope position; cfg_text becomes a
  copy of gen with it;
- think: the system prompt into gen and cfg_img first; after the inputs, text decoded on a
  copy of gen, read back as a string, re-tokenized and appended to gen;
- text decode: im_start fed at gen's rope, greedy, stop before im_end (the step budget
  counts im_start, as upstream's max_length does);
- the image: t = linspace(1, 0, N) shifted, N - 1 Euler updates; inside the interval the
  text branch (scale > 1) and image branch (scale > 1) are computed and combined, then
  renormed; the latent unpacked and decoded by the autoencoder (z / scale + shift).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from engine.models.bagel.preprocess import vae_resize, vit_image
from engine.models.bagel.prompts import GEN_THINK_SYSTEM_PROMPT, VLM_THINK_SYSTEM_PROMPT
from tests.engine.bagel.backbone_reference import Packed, latent_embeds, reference_hidden, velocity

BOS, EOS, SOI, EOI = "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"


@dataclass
class Ctx:
    rows: Packed = field(default_factory=Packed)
    rope: int = 0
    segments: int = 0   # image segments so far: each image gets its own id


@dataclass
class Reference:
    state: dict          # ema.safetensors
    llm: dict            # llm_config.json
    tokenizer: object
    vit: object          # the ViT tower (tested on its own against SigLIP)
    vae: object          # diffusers AutoencoderKL holding ae.safetensors
    vae_rule: object
    vit_rule: object
    grid: int = 64       # max_latent_size
    scale: float = 0.3611
    shift: float = 0.1159

    def tok(self, token: str) -> int:
        return self.tokenizer.convert_tokens_to_ids(token)

    def embed(self, ids: list[int]) -> torch.Tensor:
        return self.state["language_model.model.embed_tokens.weight"][torch.tensor(ids)]

    # -- contexts ------------------------------------------------------------------
    def add_text(self, ctx: Ctx, text: str) -> None:
        ids = [self.tok(BOS)] + self.tokenizer.encode(text) + [self.tok(EOS)]
        ctx.rows.add(self.embed(ids), [0] * len(ids), list(range(ctx.rope, ctx.rope + len(ids))), 0)
        ctx.rope += len(ids)

    def add_image_rows(self, ctx: Ctx, tokens: torch.Tensor, expert: int) -> None:
        start, end = self.embed([self.tok(SOI), self.tok(EOI)])
        rows = torch.cat([start[None], tokens, end[None]])
        ctx.segments += 1
        ctx.rows.add(rows, [0] + [expert] * len(tokens) + [0], [ctx.rope] * len(rows), ctx.segments)
        ctx.rope += 1

    def add_image(self, ctx: Ctx, image, latent: torch.Tensor | None) -> None:
        """image: already VAE-resized; latent [16, H/8, W/8] (None: ViT only)."""
        if latent is not None:
            c, h8, w8 = latent.shape
            h, w = h8 // 2, w8 // 2
            packed = torch.einsum("chpwq->hwpqc", latent.reshape(c, h, 2, w, 2)).reshape(-1, 4 * c)
            self.add_image_rows(ctx, latent_embeds(self.state, packed, 0.0, h, w, self.grid), 1)
        cfg = self.vit.config
        v = vit_image(image, cfg.patch_size, cfg.max_num_patch_per_side, self.vit_rule)
        self.add_image_rows(ctx, self.vit(v.pixels, v.position_ids, [len(v.pixels)]), 0)

    def hidden(self, ctx: Ctx, query: Packed) -> torch.Tensor:
        whole = Packed(ctx.rows.embeds + query.embeds, ctx.rows.experts + query.experts,
                       ctx.rows.positions + query.positions, ctx.rows.segments + query.segments)
        return reference_hidden(self.state, self.llm, whole)[-len(query.experts):]

    # -- text --------------------------------------------------------------------------
    def gen_text(self, ctx: Ctx, max_length: int) -> tuple[list[int], str]:
        ctx = copy.deepcopy(ctx)
        token, generated = self.tok(BOS), []
        for _ in range(max_length):
            generated.append(token)
            step = Packed()
            step.add(self.embed([token]), [0], [ctx.rope], 0)
            h = self.hidden(ctx, step)
            ctx.rows.add(step.embeds[0], step.experts, step.positions, 0)
            ctx.rope += 1
            token = int((h[-1] @ self.state["language_model.lm_head.weight"].T).argmax())
            if token == self.tok(EOS):
                break
        text = self.tokenizer.decode(generated).split(EOS)[0].split(BOS)[1]
        return generated[1:], text

    # -- image -----------------------------------------------------------------------------
    def velocity(self, ctx: Ctx, x: torch.Tensor, t: torch.Tensor, h: int, w: int) -> torch.Tensor:
        start, end = self.embed([self.tok(SOI), self.tok(EOI)])
        rows = torch.cat([start[None], latent_embeds(self.state, x, float(t), h, w, self.grid), end[None]])
        query = Packed()
        query.add(rows, [0] + [1] * len(x) + [0], [ctx.rope] * len(rows), 10_000)
        return velocity(self.state, self.hidden(ctx, query)[1:-1])

    def gen_image(self, gen: Ctx, cfg_text: Ctx, cfg_img: Ctx, noise: torch.Tensor, p) -> torch.Tensor:
        """noise [16, H/8, W/8] -> the final latent, unpacked the same way."""
        c, h8, w8 = noise.shape
        h, w = h8 // 2, w8 // 2
        x = torch.einsum("chpwq->hwpqc", noise.reshape(c, h, 2, w, 2)).reshape(-1, 4 * c)
        ts = torch.linspace(1, 0, p.steps)
        ts = p.shift * ts / (1 + (p.shift - 1) * ts)
        dts, ts = ts[:-1] - ts[1:], ts[:-1]
        for i, t in enumerate(ts):
            inside = t > p.cfg_interval_start and t <= p.cfg_interval_end
            s_text, s_img = (p.cfg_text_scale, p.cfg_img_scale) if inside else (1.0, 1.0)
            v = self.velocity(gen, x, t, h, w)
            if s_text > 1.0:
                v_text = self.velocity(cfg_text, x, t, h, w)
                v_img = self.velocity(cfg_img, x, t, h, w) if s_img > 1.0 else None
                v = cfg_combine(v, v_text, v_img, s_text, s_img, p.cfg_renorm_type, p.cfg_renorm_min)
            x = x - v * dts[i]
        return torch.einsum("hwpqc->chpwq", x.reshape(h, w, 2, 2, c)).reshape(c, h8, w8)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            image = self.vae.decode(latent[None] / self.scale + self.shift, return_dict=False)[0]
        return (image * 0.5 + 0.5).clamp(0, 1)[0].permute(1, 2, 0)

    # -- the whole request -----------------------------------------------------------------
    def interleave(self, inputs: list, p, want_image: bool, noise=None, image_latents=()):
        gen = Ctx()
        cfg_text, cfg_img = copy.deepcopy(gen), copy.deepcopy(gen)
        if p.think:
            prompt = GEN_THINK_SYSTEM_PROMPT if want_image else VLM_THINK_SYSTEM_PROMPT
            self.add_text(gen, prompt)
            self.add_text(cfg_img, prompt)
        shape, latents = None, list(image_latents)
        for item in inputs:
            if isinstance(item, str):
                cfg_text = copy.deepcopy(gen)
                self.add_text(gen, item)
                self.add_text(cfg_img, item)
            else:
                image = vae_resize(item, self.vae_rule)
                self.add_image(gen, image, latents.pop(0) if want_image else None)
                shape = (image.height, image.width)
                cfg_text = copy.deepcopy(gen)
        if not want_image:
            return self.gen_text(gen, p.max_new_tokens + 1)
        ids, text = [], None
        if p.think:
            ids, text = self.gen_text(gen, p.max_new_tokens + 1)
            self.add_text(gen, text)
        latent = self.gen_image(gen, cfg_text, cfg_img, noise, p)
        return ids, text, latent, self.decode(latent), shape


def cfg_combine(v, v_text, v_img, s_text, s_img, renorm_type, renorm_min):
    """Upstream's guidance: text first, then image; the renorm by type."""
    if renorm_type == "text_channel":
        guided = v_text + s_text * (v - v_text)
        factor = (v.norm(dim=-1, keepdim=True) / (guided.norm(dim=-1, keepdim=True) + 1e-8)).clamp(renorm_min, 1.0)
        guided = guided * factor
        return v_img + s_img * (guided - v_img) if v_img is not None else guided
    guided = v_text + s_text * (v - v_text)
    if v_img is not None:
        guided = v_img + s_img * (guided - v_img)
    if renorm_type == "global":
        factor = (v.norm() / (guided.norm() + 1e-8)).clamp(renorm_min, 1.0)
    else:
        factor = (v.norm(dim=-1, keepdim=True) / (guided.norm(dim=-1, keepdim=True) + 1e-8)).clamp(renorm_min, 1.0)
    return guided * factor
