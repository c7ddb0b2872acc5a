"""What each node of the BAGEL component does (services/bagel/component.py has the list):
its open-time checks (payload) and its work (run), over the request table's contexts."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Mapping

import torch

from core.errors import InvalidArgument, NotFound
from engine.models.bagel import GENERATION
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.models.bagel.preprocess import latent_grid, normalize, vae_resize
from engine.models.bagel.prompts import think_system_prompt
from engine.models.bagel.rows import image_rows, latent_tokens
from engine.models.bagel.schedule import euler_step, flow_schedule
from runtime.items import OpenNode
from services.bagel.inputs import latent_input, one_image, prompt_text, size_input, vit_images
from services.bagel.requests import ROLES, RequestTable
from services.kept_context import engine_context

BRANCHES = ("gen", "cfg_text", "cfg_img")


@lru_cache(maxsize=64)
def _schedule(steps: int, shift: float):
    return flow_schedule(steps, shift)


class BagelNodes:
    def __init__(self, parts, kv: BagelKV, table: RequestTable) -> None:
        self.parts, self.kv, self.table = parts, kv, table
        self.model = parts.backbone
        self.d = parts.defaults

    def _grid(self, height: int, width: int, field: str):
        d = self.d
        return latent_grid(height, width, d.vae_downsample, d.latent_patch_size, d.max_latent_size, field=field)

    # -- prefill ---------------------------------------------------------------------
    def prefill_payload(self, item: OpenNode, inputs: Mapping[str, Any], params: BagelParams) -> tuple:
        node = item.node
        if node == "image_in":
            return item, params, {"image": vae_resize(one_image(inputs), self.parts.vae_rule)}
        data: dict[str, Any] = {"text": prompt_text(inputs, node)}
        if node in ("prefill_und", "prefill_edit", "prefill_edit_cfg"):
            data["vit"] = vit_images(inputs, self.model.config.hidden_size)
        if node.startswith("prefill_edit"):
            latent = latent_input(inputs, self.d.latent_channels)
            h, w = latent.shape[1] * self.d.vae_downsample, latent.shape[2] * self.d.vae_downsample
            data.update(latent=latent, grid=self._grid(h, w, "open.inputs[latent]"), size=(h, w))
        if node.startswith("prefill_t2i"):
            self._grid(params.height, params.width, "params.width/height")
            data["size"] = (params.height, params.width)
        return item, params, data

    def prefill(self, item: OpenNode, params: BagelParams, data: dict) -> dict[str, torch.Tensor]:
        node, rid = item.node, item.request_id
        if node == "image_in":
            return {"image": (normalize(data["image"]) * 0.5 + 0.5).permute(1, 2, 0).contiguous()}  # [H, W, 3]
        guided = node not in ("prefill_chat", "prefill_und")
        req, new = self.table.open(rid, params, guided, engine_context(item))
        try:
            if new:
                self._put(req, params, data, guided)
        except BaseException:
            self.table.drop(rid)
            raise
        req.claimed.update(ROLES["cfg" if node.endswith("_cfg") else "gen"])
        if not guided:
            return {"ready": torch.ones(1, dtype=torch.int64)}
        return {"size": torch.tensor(req.size, dtype=torch.int64)}

    def _put(self, req, params: BagelParams, data: dict, guided: bool) -> None:
        ctx = req.ctx
        if params.think:
            ctx.add_system(self.parts.framed(think_system_prompt(guided)))
        for rows in data.get("vit", ()):
            vae = None
            if "latent" in data:
                vae = (self.model.latent_io.patchify(data["latent"]), data["grid"].position_ids)
            digest = hashlib.sha256(rows.contiguous().numpy().tobytes()).hexdigest()
            held = digest in ctx.kept_images  # a continued context holds this image's ViT tokens
            if vae is not None or not held:
                ctx.add_image(vae, None if held else rows, digest)
        ctx.add_text(self.parts.framed(data["text"]))
        ctx.finish()
        req.size = data.get("size", (0, 0))

    # -- text --------------------------------------------------------------------------
    def _request(self, item: OpenNode):
        req = self.table.get(item.request_id)
        if req is None:
            raise NotFound(f"node {item.node}: request {item.request_id!r} has no contexts on this replica "
                           "(its prefill runs elsewhere, or it ended)")
        return req

    def decode(self, item: OpenNode, params: BagelParams) -> dict[str, torch.Tensor]:
        req = self._request(item)
        p = self.parts
        if item.node == "answer":
            ids = req.ctx.decode(p.bos_id, p.eos_id, params.max_new_tokens, on_fork=False)
            if req.use is not None and req.use.keep:
                req.ctx.add_answer_end(p.bos_id, ids, p.eos_id)
            self.table.finish(item.request_id, (item.node, item.iteration))
            return {"text": torch.tensor(ids, dtype=torch.int64)}
        ids = []
        if params.think and not req.planned:
            ids = req.ctx.decode(p.bos_id, p.eos_id, params.max_new_tokens, on_fork=True)
            req.ctx.add_plan(p.framed(p.text_of(ids)))
            req.planned = True
        return {"text": torch.tensor(ids, dtype=torch.int64), "size": torch.tensor(req.size, dtype=torch.int64)}

    def init_latent(self, item: OpenNode, params: BagelParams, inputs) -> dict[str, torch.Tensor]:
        h, w = size_input(inputs, item.node)
        shape = (self.d.latent_channels, h // self.d.vae_downsample, w // self.d.vae_downsample)
        return {"latent": torch.randn(shape, generator=torch.Generator().manual_seed(params.seed))[None]}

    # -- the denoising loop ----------------------------------------------------------------
    def loop_payload(self, item: OpenNode, inputs, params: BagelParams, k: int) -> tuple:
        h, w = size_input(inputs, item.node)
        latent = latent_input(inputs, self.d.latent_channels)
        grid = self._grid(h, w, "open.inputs[size]")
        if latent.shape[1:] != (h // self.d.vae_downsample, w // self.d.vae_downsample):
            raise InvalidArgument(f"open.inputs[latent]: {list(latent.shape)} does not fit size {h}x{w}")
        if item.node == "combine":
            noise = {}
            for name in BRANCHES:
                v = inputs.get(name)
                if not isinstance(v, torch.Tensor) or not v.is_floating_point():
                    raise InvalidArgument(f"open.inputs: combine needs float {name!r}")
                noise[name] = v
            return item, params, k, latent, grid, noise
        return item, params, k, item.node[len("velocity_"):], latent, grid

    def velocities(self, payloads: list[tuple]) -> list[dict[str, torch.Tensor]]:
        """Every needed branch of every payload in one forward, nothing stored. A missing
        context raises before anything changes (the engine then retries each payload alone)."""
        outs = [{"v": torch.zeros(0)} for _ in payloads]
        items, owners = [], []
        for i, (item, params, k, branch, latent, grid) in enumerate(payloads):
            t = _schedule(params.steps, params.shift).timesteps[k]
            if branch not in params.guidance().branches_at(t):
                continue
            ctx = self._request(item).ctx.context(branch)
            tokens = latent_tokens(self.model, self.model.latent_io.patchify(latent), t, grid.position_ids)
            items.append((ctx, image_rows(self.model, self.parts.markers, tokens, GENERATION, ctx.rope)[0]))
            owners.append(i)
        if items:
            for i, hidden in zip(owners, self.kv.query(items)):
                outs[i] = {"v": self.model.latent_io.velocity(hidden[1:-1]).float().cpu()[None]}  # [1, N, p*p*C]
        for item, params, k, branch, _, _ in payloads:
            if k == params.steps - 2:
                self.table.read_last(item.request_id, branch, (item.node, item.iteration))
        return outs

    def combine(self, item: OpenNode, params: BagelParams, k: int, latent: torch.Tensor, grid,
                noise: dict) -> dict[str, torch.Tensor]:
        schedule, guidance = _schedule(params.steps, params.shift), params.guidance()
        t = schedule.timesteps[k]
        io = self.model.latent_io
        x = io.patchify(latent)  # [N, p*p*C]
        v = {}
        for name in guidance.branches_at(t):
            if tuple(noise[name].shape) != (1, *x.shape):
                raise InvalidArgument(f"open.inputs[{name}]: step {k} needs its velocity [1, {x.shape[0]}, "
                                      f"{x.shape[1]}], got {list(noise[name].shape)}")
            v[name] = noise[name][0]
        x = euler_step(x, guidance.combine(t, v).float(), schedule.dts[k])
        last = params.steps - 1
        return {"latent": io.unpatchify(x, grid.rows, grid.cols)[None],
                "step": torch.tensor([k + 1, last], dtype=torch.int64),
                "done": torch.tensor([int(k + 1 == last)], dtype=torch.int64)}
