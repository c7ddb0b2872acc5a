"""Backpressure: a client that stops reading parks its own producer once its buffers
reach their bound; a concurrent request keeps its pace (the stream is never paused)."""
import asyncio

import pytest
import torch

from conductor.executor_setup import inprocess_executor
from bench import toys
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(60)
BACKLOG = 32
A_LM = ("A", "lm", ())  # A's loop run in the lm component


def components():
    lm = toys.Toy("lm", {"lm": lambda i, p: {"frame": i["n"] + 1}}, loops={"lm": {"frame": "n"}}, run_delay_s=0.004)
    return [toys.make_embed(), lm, toys.make_codec()]


async def read_all(ex, rid, x):
    async for _ in ex.generate(rid, {"x": (torch.tensor([x]),)}):
        pass


async def b_beside_a_stalled_client() -> tuple[dict, list[bool]]:
    """Runs B to its end while A's client reads one output and then nothing. Returns A's
    state once it is parked, and, for each lm step taken while B ran, whether A's run
    was still parked in it."""
    graph = toys.toy_pipeline(max_iters=400, stop_token=-1)
    comps = components()
    lm = comps[1]
    async with inprocess_executor(graph, comps, {"gen"}, max_backlog=BACKLOG) as ex:
        stuck = ex.generate("A", {"x": (torch.tensor([0.0]),)})
        await stuck.__anext__()  # then never read again
        run = ex.requests["A"]
        # A fills its backlog and is parked: polled off the event loop, which keeps moving A's outputs
        assert await asyncio.to_thread(
            wait_until, lambda: len(run.queue) >= BACKLOG and A_LM in lm.parked, 30)
        seen = {"backlog": len(run.queue), "parked": set(lm.parked),
                "buffers": [b.num_buffered for b in run.state.buffers.values()],
                "bounds": [b.max_buffered for b in run.state.buffers.values()]}
        a_parked_in_steps = []
        step = lm.step

        def noting_step():  # on lm's engine thread
            a_parked_in_steps.append(A_LM in lm.parked)
            return step()

        lm.step = noting_step
        await read_all(ex, "B", 1.0)
        lm.step = step
        await stuck.aclose()
    return seen, a_parked_in_steps


def test_a_stalled_client_is_bounded_and_does_not_slow_others():
    seen, a_parked_in_steps = asyncio.run(b_beside_a_stalled_client())
    assert seen["backlog"] <= BACKLOG  # outputs held for the client stay at the bound
    assert ("A", "lm", ()) in seen["parked"]  # its producer waits, in its own component
    assert all(n <= bound for n, bound in zip(seen["buffers"], seen["bounds"]))
    # B keeps the pace it has alone: it ran to its end (the stream was never paused), and
    # every lm step it took had A parked, so each cost one run's time (a toy lm step costs
    # run_delay_s per unparked run), as without A.
    assert a_parked_in_steps and all(a_parked_in_steps), a_parked_in_steps.count(False)
