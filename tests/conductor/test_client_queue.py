"""ClientQueue: outputs in order, one take for everything queued, the first end wins."""
from __future__ import annotations

import asyncio

import pytest

from conductor.client_queue import ClientQueue
from conductor.request_run import END, Failure

pytestmark = pytest.mark.timeout(30)


def test_take_returns_everything_queued_in_order_then_the_end():
    async def main():
        q = ClientQueue()
        q.extend([("a", 1)])
        q.extend([])
        q.extend([("b", 2), ("c", 3)])
        assert len(q) == 3
        first = await q.take()
        q.extend([("d", 4)])
        q.end(END)
        q.end(Failure("INTERNAL", "late"))  # ignored: the first end wins
        q.extend([("e", 5)])  # ignored: nothing is queued after the end
        return first, await q.take(), await q.take(), len(q)

    first, second, third, left = asyncio.run(main())
    assert first == ([("a", 1), ("b", 2), ("c", 3)], None)
    assert second == ([("d", 4)], END)
    assert third == ([], END) and left == 0


def test_a_waiting_take_wakes_on_extend_and_on_a_failure():
    async def main():
        q = ClientQueue()
        waiting = asyncio.create_task(q.take())
        await asyncio.sleep(0)
        assert not waiting.done()
        q.extend([("x", 0)])
        got = await waiting
        waiting = asyncio.create_task(q.take())
        await asyncio.sleep(0)
        failure = Failure("UNAVAILABLE", "service b is unavailable")
        q.end(failure)
        return got, await waiting, failure

    got, ended, failure = asyncio.run(main())
    assert got == ([("x", 0)], None)
    assert ended == ([], failure)


def test_a_cancelled_take_leaves_the_queue_usable():
    async def main():
        q = ClientQueue()
        waiting = asyncio.create_task(q.take())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        q.extend([("y", 1)])
        return await q.take()

    assert asyncio.run(main()) == ([("y", 1)], None)
