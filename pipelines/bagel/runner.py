"""BAGEL's four walks in one process, on one backbone's paged KV pool: the reference the
mesh is checked against.

    understand  images (ViT only) + text -> text
    generate    text -> image
    edit        image (VAE, then ViT) + text -> image, at the resized input's size
    think       a plan decoded from `gen`, appended to `gen` only, then the image

inputs are the request's items in order: str (a text input) or a PIL image. Contexts
follow upstream's rules (engine/models/bagel/request_contexts.py); a denoising step
queries the contexts its guidance needs in one forward (engine/models/bagel/guidance.py),
combines and takes the Euler step (schedule.py). Randomness: the initial noise from
Generator(seed), [C, H/8, W/8] then patchified; the VAE posterior sample of the n-th image
put in through the VAE from Generator(seed + 1 + n). Either may be given explicitly (`latents`,
`image_latents`, the unpacked [16, H/8, W/8] layout) to reproduce a run elsewhere.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from core.errors import InvalidArgument
from engine.contexts import ContextRequest
from engine.models.bagel.kept import KeptContexts
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.models.bagel.preprocess import latent_grid, normalize, vae_resize, vit_image
from engine.models.bagel.request_contexts import RequestContexts
from engine.models.bagel.rows import latent_tokens
from engine.models.bagel.schedule import euler_step, flow_schedule
from engine.models.bagel.prompts import think_system_prompt
from engine.models.bagel.parts import BagelParts

WALKS = ("understand", "generate", "edit", "think")


@dataclass
class BagelOutput:
    walk: str
    text: str | None = None                  # the answer (understand) or the plan (think)
    text_ids: list[int] = field(default_factory=list)
    latents: torch.Tensor | None = None      # [C, H/8, W/8] the final latent, unpacked
    image_float: torch.Tensor | None = None  # [H, W, 3] in [0, 1]
    image: torch.Tensor | None = None        # [H, W, 3] uint8 (truncated, as upstream)
    context_id: str | None = None            # the kept context (ContextRequest.keep)


@dataclass(frozen=True)
class Framed:
    """A text input given as its framed ids (im_start ... im_end), e.g. an earlier answer."""
    ids: tuple[int, ...]


@dataclass(frozen=True)
class ImagePart:
    """An image input that goes in through the VAE and / or the ViT only (a PIL image
    goes through both when an image is wanted, else through the ViT)."""
    image: object
    vae: bool = True
    vit: bool = True


def pick_walk(inputs: Sequence, want_image: bool, think: bool) -> str:
    has_image = any(not isinstance(x, (str, Framed)) for x in inputs)
    if not inputs:
        raise InvalidArgument("inputs: a BAGEL request needs at least one text or image")
    if not want_image:
        return "understand"
    if think:
        return "think"
    return "edit" if has_image else "generate"


class BagelRunner:
    def __init__(self, parts: BagelParts, kv: BagelKV | None = None, kept: KeptContexts | None = None) -> None:
        self.parts = parts
        self.kv = kv if kv is not None else BagelKV(parts.backbone)
        self.kept = kept if kept is not None else KeptContexts(self.kv)
        self._ids = 0

    def run(self, inputs: Sequence, params: BagelParams, want_image: bool = True,
            latents: torch.Tensor | None = None, image_latents: Sequence[torch.Tensor] | None = None,
            on_step: Callable[[int, int], None] | None = None, request_id: str | None = None,
            context: ContextRequest | None = None) -> BagelOutput:
        """context: continue a kept context (context_id) and / or keep this request's
        contexts (keep; the output's context_id names it)."""
        walk = pick_walk(inputs, want_image, params.think)
        if want_image and all(isinstance(x, (str, Framed)) for x in inputs):
            self._grid(params.height, params.width, "params.width/height")  # refused before any work
        kept = self.kept.get(context.context_id, context.owner) if context and context.context_id else None
        self._ids += 1
        ctx = RequestContexts(self.kv, request_id or f"bagel-{self._ids}", self.parts.markers, want_image, kept)
        try:
            out = BagelOutput(walk)
            shape = self._put_inputs(ctx, inputs, params, want_image, image_latents)
            if want_image:
                self._draw(ctx, out, params, shape, latents, on_step)
            else:
                self._answer(ctx, out, params, keep=context is not None and context.keep)
            if context is not None and context.keep:
                out.context_id = self.kept.keep(ctx, context.owner, context.keep_id)
            return out
        finally:
            ctx.free()

    def _answer(self, ctx: RequestContexts, out: BagelOutput, params: BagelParams, keep: bool) -> None:
        """Greedy text on gen itself (closed with im_end when the context is kept)."""
        p = self.parts
        out.text_ids = ctx.decode(p.bos_id, p.eos_id, params.max_new_tokens, on_fork=False)
        out.text = p.text_of(out.text_ids)
        if keep:
            ctx.add_answer_end(p.bos_id, out.text_ids, p.eos_id)

    def _draw(self, ctx: RequestContexts, out: BagelOutput, params: BagelParams, shape, latents, on_step) -> None:
        """The plan (think), then the denoising loop and the VAE."""
        p = self.parts
        if params.think:
            out.text_ids = ctx.decode(p.bos_id, p.eos_id, params.max_new_tokens, on_fork=True)
            out.text = p.text_of(out.text_ids)
            ctx.add_plan(p.framed(out.text))
        ctx.finish()
        height, width = shape if shape is not None else (params.height, params.width)
        out.latents = self._denoise(ctx, params, height, width, latents, on_step)
        out.image_float = p.vae.decode(out.latents[None])[0]
        out.image = (out.image_float * 255).to(torch.uint8)

    # -- inputs ------------------------------------------------------------------------
    def _put_inputs(self, ctx: RequestContexts, inputs, params: BagelParams, want_image: bool,
                    image_latents) -> tuple[int, int] | None:
        """Every input into the contexts; -> (H, W) of the last image (an edit's output size)."""
        if params.think:
            ctx.add_system(self.parts.framed(think_system_prompt(want_image)))
        shape, n_images = None, 0
        for item in inputs:
            if isinstance(item, (str, Framed)):
                ctx.add_text(self.parts.framed(item) if isinstance(item, str) else list(item.ids))
                continue
            part = item if isinstance(item, ImagePart) else ImagePart(item, vae=want_image)
            image = vae_resize(part.image, self.parts.vae_rule)
            shape, digest = (image.height, image.width), image_digest(image)
            vit = part.vit and digest not in ctx.kept_images  # a continued context may hold its ViT tokens
            vae = None
            if part.vae and want_image:  # the n-th image through the VAE: seed + 1 + n, image_latents[n]
                given = None if image_latents is None or n_images >= len(image_latents) else image_latents[n_images]
                vae = self._vae_input(image, params.seed + 1 + n_images, given, f"image_latents[{n_images}]")
                n_images += 1
            if vae is not None or vit:
                ctx.add_image(vae, self._vit_tokens(image) if vit else None, digest)
        if image_latents is not None and len(image_latents) != n_images:
            raise InvalidArgument(f"image_latents: {len(image_latents)} given for {n_images} images put in "
                                  "through the VAE")
        return shape

    def _vae_input(self, image, seed: int, given: torch.Tensor | None, field_name: str):
        d = self.parts.defaults
        grid = self._grid(image.height, image.width, "image")
        if given is None:
            pixels = (normalize(image) * 0.5 + 0.5).permute(1, 2, 0)[None]  # [1, H, W, 3] in [0, 1]
            given = self.parts.vae.encode(pixels, torch.Generator().manual_seed(seed))[0]
        latent = check_latent(given, d.latent_channels, image.height // d.vae_downsample,
                              image.width // d.vae_downsample, field_name)
        return self.parts.backbone.latent_io.patchify(latent), grid.position_ids

    def _vit_tokens(self, image) -> torch.Tensor:
        cfg = self.parts.vit.config
        vit = vit_image(image, cfg.patch_size, cfg.max_num_patch_per_side, self.parts.vit_rule)
        return self.parts.vit(vit.pixels, vit.position_ids, [len(vit.pixels)])

    def _grid(self, height: int, width: int, field_name: str):
        d = self.parts.defaults
        return latent_grid(height, width, d.vae_downsample, d.latent_patch_size, d.max_latent_size, field=field_name)

    # -- the denoising loop ----------------------------------------------------------------
    def _denoise(self, ctx: RequestContexts, params: BagelParams, height: int, width: int,
                 latents: torch.Tensor | None, on_step) -> torch.Tensor:
        model, d = self.parts.backbone, self.parts.defaults
        grid = self._grid(height, width, "size")
        shape = (d.latent_channels, height // d.vae_downsample, width // d.vae_downsample)
        if latents is None:
            latents = torch.randn(shape, generator=torch.Generator().manual_seed(params.seed))
        x = model.latent_io.patchify(check_latent(latents, *shape, "latents")).float()  # [N, p*p*C]
        guidance, schedule = params.guidance(), flow_schedule(params.steps, params.shift)
        for i in range(len(schedule)):
            t = schedule.timesteps[i]
            tokens = latent_tokens(model, x, t, grid.position_ids)
            v = ctx.velocities(guidance.branches_at(t), tokens)
            x = euler_step(x, guidance.combine(t, v).float().cpu(), schedule.dts[i])
            if on_step is not None:
                on_step(i + 1, len(schedule))
        return model.latent_io.unpatchify(x, grid.rows, grid.cols)


def image_digest(image) -> str:
    """Names a resized RGB image by its pixels."""
    return hashlib.sha256(image.tobytes() + repr(image.size).encode()).hexdigest()


def check_latent(latent: torch.Tensor, channels: int, h: int, w: int, field_name: str) -> torch.Tensor:
    if not isinstance(latent, torch.Tensor) or tuple(latent.shape) != (channels, h, w):
        got = tuple(latent.shape) if isinstance(latent, torch.Tensor) else type(latent).__name__
        raise InvalidArgument(f"{field_name} must be [{channels}, {h}, {w}] (the unpacked latent layout), got {got}")
    if not latent.is_floating_point() or not bool(torch.isfinite(latent).all()):
        raise InvalidArgument(f"{field_name} must hold finite floats")
    return latent.float()


__all__ = ["BagelOutput", "BagelRunner", "Framed", "ImagePart", "WALKS", "pick_walk"]
