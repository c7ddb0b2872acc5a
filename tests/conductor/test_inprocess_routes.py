"""The in-process executor routes streaming edges as replicas do: its components' engine
threads push to each other over local peer links, and the conductor dispatches no chunk."""
import asyncio
import contextlib

import pytest
import torch

from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
from conductor.executor_setup import inprocess_executor

pytestmark = pytest.mark.timeout(60)


def test_streams_between_in_process_components_are_routed_by_their_engine_threads():
    async def main():
        async with inprocess_executor(pipeline_graph(50), [make_a(), make_b(), make_c()], PIPELINE_INNER_LOOPS) as ex:
            async with contextlib.aclosing(ex.generate("r", {"n": (torch.tensor([0.0]),)})) as outputs:
                got = [float(value.reshape(-1)[0]) async for _, value in outputs]
            return got, dict(ex.num_dispatched)

    got, dispatched = asyncio.run(main())
    assert got == [float(i) for i in range(1, 51)]  # the client still gets every item, in order
    assert dispatched == {"src": 1}  # mid and sink runs are opened by their own engine threads
