"""What each node of the BAGEL component does (services/bagel/component.py has the list):
its open-time checks (payload) and its work (run), over the request table's contexts."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any, Mapping

import torch

from core.errors import InvalidArgument, NotFound
from engine.models.bagel import GENERATION
from engine.models.bagel.extend_batch import ExtendBatch
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.models.bagel.preprocess import latent_grid, normalize, vae_resize
from engine.models.bagel.prompts import think_system_prompt
from engine.models.bagel.rows import image_rows, latent_tokens
from engine.models.bagel.schedule import euler_step, flow_schedule
from engine.models.bagel.text_decode import TextDecode
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
        elif node.startswith("prefill_edit_held"):
            data["vit"] = [None]  # one image, its ViT tokens held by the continued context
        if node.startswith("prefill_edit"):
            latent = latent_input(inputs, self.d.latent_channels)
            h, w = latent.shape[1] * self.d.vae_downsample, latent.shape[2] * self.d.vae_downsample
            data.update(latent=latent, grid=self._grid(h, w, "open.inputs[latent]"), size=(h, w))
        if node.startswith("prefill_t2i"):
            self._grid(params.height, params.width, "params.width/height")
            data["size"] = (params.height, params.width)
        return item, params, data

    def prefills(self, payloads: list[tuple]) -> list[dict[str, torch.Tensor]]:
        """Prefill runs queued together: the new requests' inputs go in side by side, each
        request's i-th input of every request in one forward (ExtendBatch). On a failure
        every request this call opened goes (the engine then retries each run alone)."""
        opened, puts = [], []
        try:
            for item, params, data in payloads:
                if item.node == "image_in":
                    continue
                guided = item.node not in ("prefill_chat", "prefill_und")
                req, new = self.table.open(item.request_id, params, guided, engine_context(item))
                if new:
                    opened.append(item.request_id)
                    puts.append((req.ctx, self._put(req, params, data, guided)))
            _lockstep(ExtendBatch(self.kv), puts)
        except BaseException:
            for rid in opened:
                self.table.drop(rid)
            raise
        return [self._prefilled(*p) for p in payloads]

    def _prefilled(self, item: OpenNode, params: BagelParams, data: dict) -> dict[str, torch.Tensor]:
        if item.node == "image_in":
            return {"image": (normalize(data["image"]) * 0.5 + 0.5).permute(1, 2, 0).contiguous()}  # [H, W, 3]
        req = self.table.get(item.request_id)
        req.claimed.update(ROLES["cfg" if item.node.endswith("_cfg") else "gen"])
        if item.node in ("prefill_chat", "prefill_und"):
            return {"ready": torch.ones(1, dtype=torch.int64)}
        return {"size": torch.tensor(req.size, dtype=torch.int64)}

    def _put(self, req, params: BagelParams, data: dict, guided: bool):
        """The request's inputs into its contexts, one per step of the generator (a
        caller runs several requests' steps side by side)."""
        ctx = req.ctx
        if params.think:
            ctx.add_system(self.parts.framed(think_system_prompt(guided)))
            yield
        for rows in data.get("vit", ()):
            vae = None
            if "latent" in data:
                vae = (self.model.latent_io.patchify(data["latent"]), data["grid"].position_ids)
            if rows is None and not ctx.kept_images:
                raise InvalidArgument("params.context_id: an edit of a held image continues a kept context that "
                                      "holds it; this request's holds no image")
            digest = "" if rows is None else hashlib.sha256(rows.contiguous().numpy().tobytes()).hexdigest()
            held = rows is None or digest in ctx.kept_images  # a continued context holds this image's ViT tokens
            if vae is not None or not held:
                ctx.add_image(vae, None if held else rows, digest)
                yield
        ctx.add_text(self.parts.framed(data["text"]))
        ctx.finish()
        req.size = data.get("size", (0, 0))

    # -- text --------------------------------------------------------------------------
    def request(self, item: OpenNode):
        req = self.table.get(item.request_id)
        if req is None:
            raise NotFound(f"node {item.node}: request {item.request_id!r} has no contexts on this replica "
                           "(its prefill runs elsewhere, or it ended)")
        return req

    def start_decode(self, item: OpenNode, params: BagelParams) -> TextDecode | None:
        """answer: a decode on gen; plan: one on a fork of gen with params.think (once),
        else None (nothing to decode). NotFound when the request has no contexts here."""
        req, p = self.request(item), self.parts
        if item.node == "answer":
            return req.ctx.start_decode(p.bos_id, p.eos_id, params.max_new_tokens, on_fork=False)
        if params.think and not req.planned:
            req.planned = True
            return req.ctx.start_decode(p.bos_id, p.eos_id, params.max_new_tokens, on_fork=True)
        return None

    def finish_decode(self, item: OpenNode, params: BagelParams, decode: TextDecode | None) -> dict[str, torch.Tensor]:
        """The node's outputs once its decode is done: an answer ends the request here
        (kept first, when asked); a plan goes into gen."""
        req, p = self.request(item), self.parts
        ids = decode.ids if decode is not None else []
        if decode is not None:
            req.ctx.end_decode(decode)
        if item.node == "answer":
            if req.use is not None and req.use.keep:
                req.ctx.add_answer_end(p.bos_id, ids, p.eos_id)
            self.table.finish(item.request_id, (item.node, item.iteration))
            return {"text": torch.tensor(ids, dtype=torch.int64)}
        if decode is not None:
            req.ctx.add_plan(p.framed(p.text_of(ids)))
        return {"text": torch.tensor(ids, dtype=torch.int64), "size": torch.tensor(req.size, dtype=torch.int64)}

    def abandon_decode(self, item: OpenNode, decode: TextDecode | None) -> None:
        """A decode that failed or whose request went: a plan's fork goes (gen goes with the request)."""
        req = self.table.get(item.request_id)
        if decode is not None and req is not None:
            req.ctx.end_decode(decode)

    def init_latent(self, item: OpenNode, params: BagelParams, inputs) -> dict[str, torch.Tensor]:
        h, w = size_input(inputs, item.node)
        shape = (self.d.latent_channels, h // self.d.vae_downsample, w // self.d.vae_downsample)
        return {"latent": torch.randn(shape, generator=torch.Generator().manual_seed(params.seed))[None]}

    # -- the denoising loop ----------------------------------------------------------------
    def loop_payload(self, item: OpenNode, inputs, params: BagelParams, k: int) -> tuple:
        latent, grid = self.loop_latent(item, inputs)
        if item.node == "combine":
            noise = {}
            for name in BRANCHES:
                v = inputs.get(name)
                if not isinstance(v, torch.Tensor) or not v.is_floating_point():
                    raise InvalidArgument(f"open.inputs: combine needs float {name!r}")
                noise[name] = v
            return item, params, k, latent, grid, noise
        return item, params, k, item.node[len("velocity_"):], latent, grid

    def loop_latent(self, item: OpenNode, inputs) -> tuple[torch.Tensor, Any]:
        """The latent a loop node reads ([1, C, h, w] on the wire, -> [C, h, w] fp32) and its
        size's latent grid, checked."""
        h, w = size_input(inputs, item.node)
        latent = latent_input(inputs, self.d.latent_channels)
        grid = self._grid(h, w, "open.inputs[size]")
        if latent.shape[1:] != (h // self.d.vae_downsample, w // self.d.vae_downsample):
            raise InvalidArgument(f"open.inputs[latent]: {list(latent.shape)} does not fit size {h}x{w}")
        return latent, grid

    def query(self, queries: list[tuple]) -> list[torch.Tensor]:
        """queries: (item, branch, x [N, p*p*C], t, grid) -> each one's velocity [N, p*p*C]
        (fp32, host), all in one forward, nothing stored. A missing context raises (NotFound)
        before anything runs."""
        items, embedded = [], {}
        for item, branch, x, t, grid in queries:
            ctx = self.request(item).ctx.context(branch)
            key = (id(x), float(t))  # a loop's branches query the same latent: its input rows once
            if key not in embedded:
                embedded[key] = latent_tokens(self.model, x, t, grid.position_ids)
            items.append((ctx, image_rows(self.model, self.parts.markers, embedded[key], GENERATION, ctx.rope)[0]))
        return [self.model.latent_io.velocity(h[1:-1]).float().cpu() for h in self.kv.query(items)] if items else []

    def velocities(self, payloads: list[tuple]) -> list[dict[str, torch.Tensor]]:
        """Every needed branch of every payload in one forward, nothing stored. A missing
        context raises before anything changes (the engine then retries each payload alone)."""
        outs = [{"v": torch.zeros(0)} for _ in payloads]
        queries, owners = [], []
        for i, (item, params, k, branch, latent, grid) in enumerate(payloads):
            if branch in branches_at(params, k):
                queries.append((item, branch, self.model.latent_io.patchify(latent), timestep(params, k), grid))
                owners.append(i)
        for i, v in zip(owners, self.query(queries)):
            outs[i] = {"v": v[None]}  # [1, N, p*p*C]
        for item, params, k, branch, _, _ in payloads:
            if k == params.steps - 2:
                self.table.read_last(item.request_id, branch, (item.node, item.iteration))
        return outs

    def combine(self, item: OpenNode, params: BagelParams, k: int, latent: torch.Tensor, grid,
                noise: dict) -> dict[str, torch.Tensor]:
        io = self.model.latent_io
        x = io.patchify(latent)  # [N, p*p*C]
        v = {}
        for name in branches_at(params, k):
            if tuple(noise[name].shape) != (1, *x.shape):
                raise InvalidArgument(f"open.inputs[{name}]: step {k} needs its velocity [1, {x.shape[0]}, "
                                      f"{x.shape[1]}], got {list(noise[name].shape)}")
            v[name] = noise[name][0]
        return {"latent": io.unpatchify(update(params, k, x, v), grid.rows, grid.cols)[None],
                **step_outputs(params, k)}


def branches_at(params: BagelParams, k: int) -> tuple[str, ...]:
    """The contexts the k-th Euler update reads (gen first)."""
    return params.guidance().branches_at(timestep(params, k))


def timestep(params: BagelParams, k: int) -> torch.Tensor:
    """The flow time of the k-th update (fp32, 0-d)."""
    return _schedule(params.steps, params.shift).timesteps[k]


def update(params: BagelParams, k: int, x: torch.Tensor, v: dict[str, torch.Tensor]) -> torch.Tensor:
    """The k-th Euler update of x [N, p*p*C] from its branches' velocities (branches_at):
    guidance and renorm (engine/models/bagel/guidance.py), then x - v' dt."""
    schedule = _schedule(params.steps, params.shift)
    return euler_step(x, params.guidance().combine(schedule.timesteps[k], v).float(), schedule.dts[k])


def step_outputs(params: BagelParams, k: int) -> dict[str, torch.Tensor]:
    """step [k + 1, steps - 1] (the progress a client sees) and done [1] after the k-th update."""
    last = params.steps - 1
    return {"step": torch.tensor([k + 1, last], dtype=torch.int64),
            "done": torch.tensor([int(k + 1 == last)], dtype=torch.int64)}


def _lockstep(batch: ExtendBatch, puts: list[tuple]) -> None:
    """puts: (request contexts, its _put generator): one step of each, then one flush,
    until all are done."""
    for ctx, _ in puts:
        ctx.batch = batch
    try:
        live = list(puts)
        while live:
            live = [(ctx, put) for ctx, put in live if next(put, StopIteration) is not StopIteration]
            batch.flush()
    finally:
        for ctx, _ in puts:
            ctx.batch = None
