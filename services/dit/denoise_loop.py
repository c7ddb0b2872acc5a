"""The guided denoising loop run inside one DiT replica (a loop whose nodes all sit on one
replica runs there): node `denoise_loop`, opened once per request, one iteration per engine step.

    denoise_loop   latent, each branch's conditioning (<loop_prefix><name>, services.dit.hook)
                   -> step [k + 1, steps] every iteration; latent [1, C, h, w] and done [1]
                      at the last one; NodeDone after params.steps iterations

Each iteration queues the request's branches (the model's: two for CFG, three for a model
guiding on text and image apart) as ordinary denoising work items, so they batch with
each other and with every other request's branches (of this node or of the
conductor-driven denoise_<branch> nodes); once all are back the model's guided update
runs here, without a conductor round trip per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine.stateless_engine import StatelessEngine, WorkItem, WorkResult
from runtime.grpc_status import failure
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode, OutboundEvent
from core.errors import ResourceExhausted


@dataclass(frozen=True)
class BranchTag:
    """Marks a work item as one branch of one iteration of a loop run."""

    run: tuple[str, tuple[int, ...]]  # (request_id, iteration of the open)
    branch: str
    k: int


@dataclass
class LoopRun:
    item: OpenNode
    latent: torch.Tensor                  # [1, C, h, w], the state carried between iterations
    conditioning: dict[str, dict]         # branch -> conditioning name -> tensor ([1, S, D], [1, P], ...)
    params: Any                           # the model's parsed params
    num_steps: int
    k: int = 0
    noise: dict[str, torch.Tensor] = field(default_factory=dict)  # branch -> prediction of step k


class DenoiseLoops:
    """Open loop runs of one DiT component. `work(branch, latent, conditioning, params, k)
    -> (key, payload)` makes a branch's work item; `update(latent, noise, params, k)` is
    the component's combine (the model's guided step, plus step and done)."""

    def __init__(self, engine: StatelessEngine, branches: tuple[str, ...], work: Callable[..., tuple],
                 update: Callable[..., dict[str, Any]]) -> None:
        self.engine = engine
        self.branches = branches
        self.work = work
        self.update = update
        self.runs: dict[tuple[str, tuple[int, ...]], LoopRun] = {}

    def open(self, run: LoopRun) -> None:
        self._queue(run)
        self.runs[(run.item.request_id, run.item.iteration)] = run

    def _queue(self, run: LoopRun) -> None:
        if self.engine.num_queued + len(self.branches) > self.engine.config.max_queued:
            raise ResourceExhausted(f"node {run.item.node}: the dit queue is full ({self.engine.num_queued} items)")
        for branch in self.branches:
            key, payload = self.work(branch, run.latent, run.conditioning[branch], run.params, run.k)
            tag = BranchTag((run.item.request_id, run.item.iteration), branch, run.k)
            self.engine.add(WorkItem(run.item.request_id, key, payload, tag))

    def cancel(self, request_id: str) -> None:
        self.runs = {key: run for key, run in self.runs.items() if key[0] != request_id}

    def on_result(self, tag: BranchTag, result: WorkResult) -> list[OutboundEvent]:
        run = self.runs.get(tag.run)
        if run is None or tag.k != run.k:
            return []  # cancelled (or failed) meanwhile
        item = run.item
        if not result.ok:
            del self.runs[tag.run]
            self.engine.abort(item.request_id)
            status, message = failure(result.error, f"node {item.node} step {run.k}")
            return [NodeError(item.request_id, item.node, status, message, item.iteration)]
        run.noise[tag.branch] = result.output["noise"]
        if len(run.noise) < len(self.branches):
            return []
        return self._advance(run)

    def _advance(self, run: LoopRun) -> list[OutboundEvent]:
        item, k = run.item, run.k
        out = self.update(run.latent, run.noise, run.params, k)
        run.latent, run.noise, run.k = out["latent"], {}, k + 1
        is_last = run.k >= run.num_steps
        tensors = {"step": out["step"]}
        if is_last:  # only the last latent leaves the loop (it feeds the VAE)
            tensors.update(latent=out["latent"], done=out["done"])
        events: list[OutboundEvent] = [NodeOutput(item.request_id, item.node, tensors, item.iteration + (k,))]
        if is_last:
            del self.runs[(item.request_id, item.iteration)]
            return events + [NodeDone(item.request_id, item.node, iteration=item.iteration)]
        try:
            self._queue(run)
        except ResourceExhausted as e:
            del self.runs[(item.request_id, item.iteration)]
            events.append(NodeError(item.request_id, item.node, e.status, str(e), item.iteration))
        return events
