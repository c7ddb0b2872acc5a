"""LoopCalls: an engine iteration's calls reach the event loop in order, with one wake-up."""
from __future__ import annotations

import asyncio
import threading

import pytest

from runtime.loop_calls import LoopCalls


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _count_wakeups(loop) -> list:
    """Wraps this loop's call_soon_threadsafe to count how often another thread wakes it."""
    wakes, real = [], loop.call_soon_threadsafe

    def counting(fn, *args):
        wakes.append(fn)
        return real(fn, *args)

    loop.call_soon_threadsafe = counting
    return wakes


def _on_loop(loop, fn):
    """Runs fn on the loop and waits for it (after everything scheduled before it)."""
    return asyncio.run_coroutine_threadsafe(asyncio.sleep(0, fn()), loop).result(10)


def test_calls_wait_for_the_flush_then_run_in_order_on_the_loop(loop):
    wakes = _count_wakeups(loop)
    calls, seen = LoopCalls(), []
    for i in range(5):
        calls.call(loop, lambda i=i: seen.append((i, threading.current_thread() is not threading.main_thread())))
    assert calls.num_pending == 5 and seen == [] and wakes == []
    calls.flush()
    _on_loop(loop, lambda: None)
    assert seen == [(i, True) for i in range(5)]
    assert [w.__name__ for w in wakes].count("_run_all") == 1  # one wake-up for the whole iteration
    assert calls.num_pending == 0


def test_a_failing_call_does_not_lose_the_others(loop, caplog):
    calls, seen = LoopCalls(), []
    calls.call(loop, seen.append, 1)
    calls.call(loop, lambda: 1 / 0)
    calls.call(loop, seen.append, 3)
    calls.flush()
    _on_loop(loop, lambda: None)
    assert seen == [1, 3]
    assert "a call from the engine thread failed" in caplog.text


def test_each_loop_gets_its_own_batch_and_a_closed_loop_drops_its_calls(loop):
    closed = asyncio.new_event_loop()
    closed.close()
    calls, seen = LoopCalls(), []
    calls.call(closed, seen.append, "never")
    calls.call(loop, seen.append, "delivered")
    calls.flush()  # does not raise for the closed loop
    _on_loop(loop, lambda: None)
    assert seen == ["delivered"]
