"""The event loop every starmesh asyncio process runs: uvloop, where it is installed.

Every process of a mesh is mostly an event loop moving gRPC messages, so the loop's own
cost per wake-up and per callback is paid on every message. uvloop (pinned by the
project) is measured against asyncio's loop in bench.conductor: a bare grpc.aio stream
and a unary round trip cost less CPU and time per message on it, and so does every hop.

STARMESH_EVENT_LOOP=asyncio runs asyncio's own loop instead (to compare, or to rule the
loop out); a machine without uvloop runs asyncio's too. Any other value is refused,
naming the variable.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable

VARIABLE = "STARMESH_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new event loop for this process (read from the environment each call)."""
    choice = os.environ.get(VARIABLE, "") or "uvloop"
    if choice not in CHOICES:
        raise ValueError(f"{VARIABLE}={choice!r}: must be one of {', '.join(CHOICES)}")
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError:  # an install without it: asyncio's loop serves the same
            return asyncio.new_event_loop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


def run(main: Awaitable[Any]) -> Any:
    """asyncio.run(main) on this process's event loop."""
    try:
        factory = loop_factory()
    except ValueError:
        if asyncio.iscoroutine(main):
            main.close()  # never to run: no "never awaited" warning beside the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def name(loop: asyncio.AbstractEventLoop) -> str:
    """'uvloop' or 'asyncio': which loop `loop` is (Describe and logs say it)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
