"""Backpressure: a client that stops reading parks its own producer once its buffers
reach their bound; a concurrent request keeps its pace (the stream is never paused)."""
import asyncio
import time

import pytest
import torch

from conductor.executor_setup import inprocess_executor
from bench import toys

pytestmark = pytest.mark.timeout(60)
BACKLOG = 32


def components():
    lm = toys.Toy("lm", {"lm": lambda i, p: {"frame": i["n"] + 1}}, loops={"lm": {"frame": "n"}}, run_delay_s=0.004)
    return [toys.make_embed(), lm, toys.make_codec()]


async def read_all(ex, rid, x):
    async for _ in ex.generate(rid, {"x": (torch.tensor([x]),)}):
        pass


async def timed_b(stalled: bool) -> tuple[float, dict]:
    graph = toys.toy_pipeline(max_iters=400, stop_token=-1)
    comps = components()
    async with inprocess_executor(graph, comps, {"gen"}, max_backlog=BACKLOG) as ex:
        seen = {}
        if stalled:
            stuck = ex.generate("A", {"x": (torch.tensor([0.0]),)})
            await stuck.__anext__()  # then never read again
            await asyncio.sleep(0.5)  # A fills its backlog and is parked
            run = ex.requests["A"]
            seen = {"backlog": len(run.queue), "parked": set(comps[1].parked),
                    "buffers": [b.num_buffered for b in run.state.buffers.values()],
                    "bounds": [b.max_buffered for b in run.state.buffers.values()]}
        t0 = time.perf_counter()
        await read_all(ex, "B", 1.0)
        elapsed = time.perf_counter() - t0
        if stalled:
            await stuck.aclose()
    return elapsed, seen


def test_a_stalled_client_is_bounded_and_does_not_slow_others():
    async def main():
        alone = min([(await timed_b(False))[0] for _ in range(2)])
        runs = [await timed_b(True) for _ in range(2)]
        return alone, min(t for t, _ in runs), runs[0][1]

    alone, with_stalled, seen = asyncio.run(main())
    assert seen["backlog"] <= BACKLOG  # outputs held for the client stay at the bound
    assert ("A", "lm", ()) in seen["parked"]  # its producer waits, in its own component
    assert all(n <= bound for n, bound in zip(seen["buffers"], seen["bounds"]))
    assert with_stalled <= 1.10 * alone + 0.02, (alone, with_stalled)
