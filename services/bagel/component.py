"""BAGEL's backbone as a stateless component on its own paged KV pool (BagelKV).

Beside the thinker rather than on it: the thinker's LLM engine schedules token
sequences, while BAGEL's steps carry per-row experts, image segments, rope positions of
their own and queries that read a context without writing it; BagelKV drives the same
KVPool and ModelRunner with those.

    image_in            media, media_parts -> image float [H, W, 3] in [0, 1] (the one image
                        of an edit, VAE-resized, for the VAE's encode)
    prefill_chat        prompt -> ready [1]                       (text only, text wanted)
    prefill_und         prompt + the encoder's outputs -> ready   (images through the ViT only)
    answer              ready -> text int64 [n]                   (greedy, up to max_new_tokens)
    prefill_t2i[_cfg]   prompt -> size int64 [2] (height, width)
    prefill_edit[_cfg]  prompt + the encoder's outputs + latent [1, C, h, w] -> size
    prefill_edit_held[_cfg]  prompt + latent -> size (the continued context holds the image's
                        ViT tokens: only its VAE tokens go in)
    plan                size -> text (the plan with params.think, else empty), size
    init_latent         size -> latent [1, C, h, w] (randn from Generator(params.seed))
    velocity_<context>  latent, size -> v [1, N, p*p*C] (empty when the step does not need it)
    combine             latent, size, gen, cfg_text, cfg_img -> latent, step [k+1, steps-1], done [1]
    denoise             latent, size, size_cfg -> step [k+1, steps-1] at each update k; latent
                        [1, C, h, w] and done [1] after the last (the loop run here, opened once:
                        every branch on this replica)

A prefill node builds the request's contexts once per replica (the first of a request's
prefill nodes here does; the other finds them) and claims those its replica's velocity
nodes read: `gen` (prefill_*), `cfg_text` and `cfg_img` (prefill_*_cfg). The velocity
node of the last step gives its context up; when every claimed one is, the request's
blocks go back (and at the latest when the conductor's Cancel ends the request here).
Velocity runs of any requests and contexts queued together are one forward; `answer` and
`plan` decode token by token beside every other decode in flight (services/bagel/decodes.py:
one forward per step over all of them), outside the engine's queue; `denoise` runs take
their updates side by side the same way (services/bagel/denoises.py: every branch of every
run in flight in one forward per step), with no conductor round trip per update.

Kept contexts (engine/models/bagel/kept.py): a request whose params say keep_context is
kept here under the conductor's id when it is done here (the run that kept it says
`context_kept` in its output's metadata); one naming context_id starts from it; a
ContextOp releases one (context_op). The steps run on the CPU path (the CUDA step path
does not carry their features yet).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Hashable

import torch

from core.errors import InvalidArgument
from runtime.grpc_status import failure
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.stateless_engine import StatelessConfig, WorkItem, WorkResult
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode
from runtime.stateless_component import StatelessComponent
from services.bagel.decodes import Decodes
from services.bagel.denoises import Denoises
from services.bagel.model_nodes import BagelNodes
from services.bagel.requests import RequestTable

VELOCITY = ("velocity_gen", "velocity_cfg_text", "velocity_cfg_img")
DECODES = ("answer", "plan")
PREFILLS = ("prefill_chat", "prefill_und", "prefill_t2i", "prefill_t2i_cfg", "prefill_edit", "prefill_edit_cfg",
            "prefill_edit_held", "prefill_edit_held_cfg")


class BagelComponent(StatelessComponent):
    name = "bagel"
    nodes = ("image_in", *PREFILLS, *DECODES, "init_latent", *VELOCITY, "combine", "denoise")

    def __init__(self, parts, kv: BagelKV, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.table = RequestTable(kv, parts.markers)
        self.impl = BagelNodes(parts, kv, self.table)
        self.decodes = Decodes(self.impl)
        self.denoises = Denoises(self.impl)

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str | None = None, device: str = "cpu", num_blocks: int = 2048,
                        block_size: int = 16, max_batch_size: int = 16) -> "BagelComponent":
        from services.bagel.parts import backbone_parts

        parts = backbone_parts(checkpoint, dtype, device)
        kv = BagelKV(parts.backbone, num_blocks=num_blocks, block_size=block_size, device=device)
        return cls(parts, kv, StatelessConfig(max_batch_size=max_batch_size))

    def open(self, item: OpenNode, inputs: dict[str, Any]) -> None:
        if item.node in DECODES:  # token by token beside the other decodes, not one engine run
            self.decodes.add(item, BagelParams.from_params(item.params))
            return
        if item.node == "denoise":  # update by update beside the other loops in flight
            self.denoises.add(item, BagelParams.from_params(item.params), inputs)
            return
        super().open(item, inputs)

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = BagelParams.from_params(item.params)
        node = item.node
        if node in VELOCITY or node == "combine":
            k = self._step_index(item, params)
            return (node if node == "combine" else "velocity",), self.impl.loop_payload(item, inputs, params, k)
        if node in PREFILLS or node == "image_in":
            return ("prefill", node), self.impl.prefill_payload(item, inputs, params)
        return ("init_latent",), (item, params, inputs)

    @staticmethod
    def _step_index(item: OpenNode, params: BagelParams) -> int:
        if not item.iteration:
            raise InvalidArgument(f"open.iteration: node {item.node} runs inside the denoising loop (no step index)")
        k = item.iteration[-1]
        if k >= params.steps - 1:
            raise InvalidArgument(f"open.iteration: step {k} is past params.steps - 1 ({params.steps - 1} updates)")
        return k

    @torch.inference_mode()
    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        if key[0] == "velocity":
            return self.impl.velocities(payloads)
        if key[0] == "combine":
            return [self.impl.combine(*p) for p in payloads]
        if key[0] == "prefill":
            return self.impl.prefills(payloads)
        return [self.impl.init_latent(*p) for p in payloads]

    def has_work(self) -> bool:
        return bool(self.decodes) or bool(self.denoises) or super().has_work()

    def step(self) -> list:
        self.table.kept.table.expire()  # kept contexts past their TTL go (a sweep at most each second)
        events = super().step() if self.engine.has_work() else []
        if self.decodes:
            with torch.inference_mode():
                ended = self.decodes.step()
            for item, output, error in ended:
                done = WorkResult(WorkItem(item.request_id, DECODES, None, tag=item), output, error)
                events += self.events_for(done)
        if self.denoises:
            with torch.inference_mode():
                stepped = self.denoises.step()
            for item, k, output, error in stepped:
                events += self._denoise_events(item, k, output, error)
        return events

    def _denoise_events(self, item: OpenNode, k: int, output, error) -> list:
        """A denoise run's k-th update: its outputs at iteration + (k,), NodeDone after the
        last (the one that may have kept the request's contexts says so)."""
        if error is not None:
            status, message = failure(error, f"node {item.node} step {k}")
            return [NodeError(item.request_id, item.node, status, message, item.iteration)]
        events = [NodeOutput(item.request_id, item.node, output, item.iteration + (k,), metadata=self._kept(item))]
        if "done" in output:
            events.append(NodeDone(item.request_id, item.node, iteration=item.iteration))
        return events

    def events_for(self, result) -> list:
        """A run that kept the request's contexts says so (the conductor's Usage.context_id
        and where a follow-up goes); the gen prefill of a request continuing a kept context
        says how many of gen's rows it took from it (Usage.cached_prompt_tokens) of how
        many gen holds (Usage.prompt_tokens), as the thinker's prefill does."""
        events = super().events_for(result)
        item = result.item.tag
        metadata = self._kept(item)
        req = self.table.get(item.request_id)
        if item.node in PREFILLS and not item.node.endswith("_cfg") and req is not None and req.ctx.num_kept_rows:
            metadata.update(cached_prompt_tokens=req.ctx.num_kept_rows, prompt_tokens=req.ctx.gen.num_cached_tokens)
        if metadata and events and isinstance(events[0], NodeOutput):
            events[0] = dataclasses.replace(events[0], metadata=metadata)
        return events

    def _kept(self, item: OpenNode) -> dict:
        """{"context_kept": id} when this run kept the request's contexts, else {}."""
        kept = self.table.kept_by.pop((item.request_id, item.node, item.iteration), None)
        return {"context_kept": kept} if kept else {}

    def cancel(self, request_id: str) -> None:
        super().cancel(request_id)
        self.decodes.cancel(request_id)
        self.denoises.cancel(request_id)
        self.table.drop(request_id)
        for key in [k for k in self.table.kept_by if k[0] == request_id]:
            del self.table.kept_by[key]

    def context_op(self, op) -> None:
        """A kept context released by its owner (runtime.items.ContextOp, keep_tokens 0);
        NotFound when it is gone or another owner's. A BAGEL context (two chains, image
        rows among the texts) is released whole: cutting it back is refused."""
        if op.keep_tokens:
            raise InvalidArgument(f"context_op.keep_tokens: a BAGEL context is released whole, not cut back "
                                  f"to {op.keep_tokens} tokens")
        self.table.kept.release(op.context_id, op.owner)

    def load(self) -> dict:
        """Keyed as the engines' loads are (engine/engine_load.py), so the pool and the kept
        contexts export as the thinker's do (runtime/load_families.py) and `starmesh
        status` shows them alike; rows_* are the backbone's own counters."""
        kv = self.table.kv
        return {"queued": self.engine.num_queued, "num_running": len(self.table.requests),
                "kv_blocks_used": kv.pool.num_used_blocks, "kv_blocks_total": kv.pool.total,
                "kv_blocks_free": kv.pool.num_free_blocks, "contexts": len(self.table.kept),
                "context_blocks": self.table.kept.num_blocks, "contexts_kept_total": self.table.kept.kept_total,
                "contexts_dropped_total": self.table.kept.dropped_total,
                "rows_written": kv.rows_written, "rows_queried": kv.rows_queried}

    def close(self) -> None:
        self.decodes.clear()
        self.denoises.clear()
        for request_id in list(self.table.requests):
            self.table.drop(request_id)
        super().close()
