"""The backbone's denoising loops in flight (`denoise` runs: the loop run inside the
backbone when every guidance branch sits on this replica), stepped together.

Each component step takes one Euler update of every run: the branches each run's update
reads (params.guidance().branches_at(t): gen, cfg_text, cfg_img) of every run in one
forward (BagelNodes.query, as the fan-out loop's velocity runs queued together), then each
run's guided update (model_nodes.update, the `combine` node's). A run joins at the next
step after it opens and leaves after its last update (steps - 1 of them), when its
contexts are given up as after the fan-out loop's last velocity runs
(RequestTable.read_last: kept when asked, then freed). A step whose batched forward fails
is retried run by run, so one bad request fails only its own run (its contexts go).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.errors import InvalidArgument
from engine.models.bagel.params import BagelParams
from runtime.items import OpenNode
from services.bagel.model_nodes import BRANCHES, branches_at, step_outputs, timestep, update


@dataclass(eq=False)
class DenoiseRun:
    item: OpenNode
    params: BagelParams
    x: torch.Tensor  # [N, p*p*C] fp32: the patchified latent, carried between updates
    grid: Any        # the image's LatentGrid (rows, cols, position ids)
    k: int = 0       # the next update

    def queries(self) -> list[tuple]:
        """(item, branch, x, t, grid) of each branch the k-th update reads (BagelNodes.query)."""
        t = timestep(self.params, self.k)
        return [(self.item, b, self.x, t, self.grid) for b in branches_at(self.params, self.k)]


class Denoises:
    def __init__(self, nodes) -> None:
        """nodes: services.bagel.model_nodes.BagelNodes (the request table, the queries)."""
        self.nodes = nodes
        self.runs: list[DenoiseRun] = []
        self.num_steps = 0  # component steps that ran updates (each one batched forward, unless retried)

    def __len__(self) -> int:
        return len(self.runs)

    def add(self, item: OpenNode, params: BagelParams, inputs) -> None:
        """Checks the run's inputs (latent [1, C, h, w], size) and bound, and that its
        request's contexts are here (NotFound); it takes its first update at the next step."""
        if item.max_iters and params.steps - 1 > item.max_iters:
            raise InvalidArgument(f"params.steps ({params.steps}) takes {params.steps - 1} updates, past the "
                                  f"denoising loop's bound ({item.max_iters})")
        latent, grid = self.nodes.loop_latent(item, inputs)
        self.nodes.request(item)
        x = self.nodes.model.latent_io.patchify(latent)  # [N, p*p*C] fp32
        self.runs.append(DenoiseRun(item, params, x, grid))

    def step(self) -> list[tuple[OpenNode, int, dict[str, torch.Tensor] | None, BaseException | None]]:
        """One update of every run: -> (item, k, outputs, None) per run (step; latent and
        done too after its last), (item, k, None, error) for each run that failed."""
        runs = list(self.runs)
        if not runs:
            return []
        velocities, failed = self._forward(runs)
        out = []
        for run in runs:
            k, error = run.k, failed.get(id(run))
            if error is None:
                try:
                    out.append((run.item, k, self._update(run, velocities[id(run)]), None))
                    continue
                except Exception as e:  # noqa: BLE001 - its own run fails
                    error = e
            if run in self.runs:  # (an error past its last update: it has left already)
                self.runs.remove(run)
            self.nodes.table.drop(run.item.request_id)
            out.append((run.item, k, None, error))
        return out

    def _forward(self, runs: list[DenoiseRun]) -> tuple[dict[int, dict], dict[int, BaseException]]:
        """-> ({run: {branch: velocity [N, p*p*C]}}, {run: error}): one forward over every
        run's queries, or, when it fails, one per run."""
        self.num_steps += 1
        queries = {id(r): r.queries() for r in runs}
        try:
            return _split(runs, queries, self.nodes.query([q for r in runs for q in queries[id(r)]])), {}
        except Exception as e:  # noqa: BLE001 - isolate the failing run below
            if len(runs) == 1:
                return {}, {id(runs[0]): e}
        velocities, failed = {}, {}
        for run in runs:
            try:
                velocities |= _split([run], queries, self.nodes.query(queries[id(run)]))
            except Exception as e:  # noqa: BLE001
                failed[id(run)] = e
        return velocities, failed

    def _update(self, run: DenoiseRun, v: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        params, k = run.params, run.k
        run.x = update(params, k, run.x, v)
        run.k += 1
        outputs = step_outputs(params, k)
        if k < params.steps - 2:
            return {"step": outputs["step"]}
        self.runs.remove(run)
        for branch in BRANCHES:  # its last read of each context: the request ends here
            self.nodes.table.read_last(run.item.request_id, branch, (run.item.node, run.item.iteration))
        latent = self.nodes.model.latent_io.unpatchify(run.x, run.grid.rows, run.grid.cols)[None]  # [1, C, h, w]
        return {**outputs, "latent": latent}

    def cancel(self, request_id: str) -> None:
        """The request's runs go (its contexts go with the request)."""
        self.runs = [r for r in self.runs if r.item.request_id != request_id]

    def clear(self) -> None:
        self.runs = []


def _split(runs: list[DenoiseRun], queries: dict[int, list], velocities: list[torch.Tensor]) -> dict[int, dict]:
    """The flat list of velocities (runs' queries in order) -> {run: {branch: velocity}}."""
    out, i = {}, 0
    for run in runs:
        branches = [q[1] for q in queries[id(run)]]
        out[id(run)] = dict(zip(branches, velocities[i:i + len(branches)]))
        i += len(branches)
    return out
