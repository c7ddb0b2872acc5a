"""Executor.generate_batches: the outputs that are queued together come as one batch, in
order; flattened, the batches are exactly generate's outputs; a failure still raises."""
import asyncio
import contextlib

import pytest
import torch

from bench import toys
from conductor.executor import RequestFailed
from conductor.executor_setup import inprocess_executor
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(60)


def _components():
    return [toys.make_embed(), toys.make_lm(), toys.make_codec()]


def _by_name(outputs) -> dict:
    """Each output's values in order (frames and audio chunks interleave as they arrive)."""
    got = {}
    for name, value in outputs:
        got.setdefault(name, []).append(value.tolist())
    return got


def test_flattened_batches_are_the_outputs_of_generate():
    async def main():
        async with inprocess_executor(toys.toy_pipeline(40, stop_token=10**6), _components(), {"gen"}) as ex:
            single = _by_name([o async for o in ex.generate("one", {"x": (torch.tensor([1.0]),)})])
            batches = [b async for b in ex.generate_batches("many", {"x": (torch.tensor([1.0]),)})]
        return single, batches

    single, batches = asyncio.run(main())
    assert all(batches) and _by_name([o for b in batches for o in b]) == single
    assert len(single["frame"]) == 40 and len(single["audio"]) == 14  # chunks of 3 frames, the last short


def test_outputs_queued_while_the_reader_is_away_come_as_one_batch():
    async def main():
        async with inprocess_executor(toys.toy_pipeline(10**6, stop_token=-1), _components(), {"gen"}) as ex:
            async with contextlib.aclosing(ex.generate_batches("slow", {"x": (torch.tensor([1.0]),)})) as batches:
                first = await anext(batches)
                queue = ex.requests["slow"].queue
                # the reader is away: the request's outputs pile up in its queue meanwhile
                assert await asyncio.to_thread(wait_until, lambda: len(queue) >= 5)
                queued = len(queue)
                second = await anext(batches)
        return first, queued, second  # closing the generator cancelled the endless request

    first, queued, second = asyncio.run(main())
    assert first and len(second) >= queued >= 5  # everything queued by then, in one batch
    frames = [value.item() for b in (first, second) for name, value in b if name == "frame"]
    assert frames == [float(k) for k in range(3, 3 + len(frames))]  # in order: embed 2, then +1 per step


def test_a_failure_after_some_outputs_raises_once_they_are_taken():
    async def main():
        codec = toys.make_codec()
        codec.fail_on = "fails"  # its runs of this request raise: after the lm's first frames
        components = [toys.make_embed(), toys.make_lm(), codec]
        async with inprocess_executor(toys.toy_pipeline(12, stop_token=10**6), components, {"gen"}) as ex:
            taken = []
            with pytest.raises(RequestFailed) as failed:
                async for batch in ex.generate_batches("fails", {"x": (torch.tensor([1.0]),)}):
                    taken += batch
            return taken, failed.value

    taken, error = asyncio.run(main())
    assert "codec" in str(error) and all(name == "frame" for name, _ in taken)
