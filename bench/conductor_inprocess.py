"""bench.conductor's in-process baselines: the walk in this process, with and without a
client wire.

`inprocess_items_per_s` runs the walk through `inprocess_executor` inside the bench,
with no client wire: every item is handed over as a Python object. The mesh's items
cross the Conductor gRPC API to a client process as well, so the two differ by more
than the mesh. `frontdoor_inprocess` serves `Conductor.Generate` on loopback as the
mesh's conductor does, its executor running every node on engine threads of its own
process (local peer links between them): the same client process reads it the same
way, so `mesh_over_frontdoor_inprocess` compares only what the mesh adds, its processes
and their hops.
"""
from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Callable

from bench.conductor_client import Client
from conductor.service import ConductorService


class InProcessConductor(ConductorService):
    """A ConductorService whose models' nodes all run in this process."""

    def __init__(self, models, components: Callable[[], list], **kwargs) -> None:
        """components(): fresh components hosting every node of each model's graph."""
        super().__init__(models, **kwargs)
        self._components = components

    async def _open(self) -> None:
        from conductor.executor_setup import inprocess_executor

        for model in self.models:
            self.executors[model.name] = await self._stack.enter_async_context(
                inprocess_executor(model.graph, self._components(), model.inner_loops))
        self._publish_health()


def start_frontdoor_inprocess(items: int):
    """The bench's pipeline on one in-process conductor, SERVING on loopback."""
    from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
    from conductor.model import ServedModel
    from conductor.placement import Placement
    from runtime.background import BackgroundServer

    placement = Placement.from_dict({"services": {"here": {"replicas": ["127.0.0.1:9"]}},
                                     "placement": {"src": "here", "mid": "here", "sink": "here"}})
    model = ServedModel("pipe", pipeline_graph(items), placement, PIPELINE_INNER_LOOPS)
    server = BackgroundServer(InProcessConductor([model], lambda: [make_a(), make_b(), make_c()]))
    server.start()
    return server


async def inprocess_items_per_s(items: int, concurrency: int, rounds: int) -> tuple[float, float]:
    """Items per second and CPU microseconds per item (this process) of the walk run
    through inprocess_executor here, no client wire."""
    import torch

    from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
    from conductor.executor_setup import inprocess_executor

    async with inprocess_executor(pipeline_graph(items), [make_a(), make_b(), make_c()], PIPELINE_INNER_LOOPS) as ex:
        async def one(rid: str) -> int:
            got = 0
            async with contextlib.aclosing(ex.generate(rid, {"n": (torch.tensor([0.0]),)})) as outputs:
                async for _ in outputs:
                    got += 1
                    if got >= items:
                        break
            return got

        await asyncio.gather(*(one(f"warm-{i}") for i in range(concurrency)))
        t0, cpu0 = time.perf_counter(), time.process_time()
        total = sum(await asyncio.gather(*(one(f"r{i}") for i in range(rounds * concurrency))))
        return total / (time.perf_counter() - t0), (time.process_time() - cpu0) / total * 1e6


def frontdoor_inprocess(args) -> dict:
    """The same walk in one process behind the conductor's gRPC front door, read by the
    same client process as the mesh (bench.conductor_inprocess): medians over --rounds."""
    from bench.conductor_inprocess import start_frontdoor_inprocess

    server = start_frontdoor_inprocess(args.items)
    client, rates, cpus = None, [], []
    try:
        client = Client(server.address, {})
        for r in range(args.rounds + 1):  # round 0 warms up
            got = client.run(model="pipe", prefix=f"fd{r}", requests=args.sweep_rounds * args.concurrency,
                             concurrency=args.concurrency, items=args.items, params={"interval_s": 0.0})
            if r:
                rates.append(got["items"] / got["wall_s"])
                cpus.append(got["conductor_cpu_s"] / got["items"] * 1e6)
    finally:
        if client is not None:
            client.close()
        server.stop()
    return {"frontdoor_inprocess_items_per_s": statistics.median(rates),
            "frontdoor_inprocess_cpu_us_per_item": statistics.median(cpus)}
