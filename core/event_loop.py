"""The event loop of each starmesh asyncio process: uvloop where the process only moves
messages, asyncio's own where it also runs a model.

The conductor and the gateway do little but move gRPC and HTTP messages, so the loop's
own cost per wake-up and per callback is paid on every message: on uvloop (pinned by the
project) they run by default. A component service's event loop shares its process (and
the GIL) with an engine thread running a model; there uvloop saved no CPU and cost
first-audio latency in the speech mesh, so component services run asyncio's loop by
default. Measured in docs/operations.md.

STARMESH_EVENT_LOOP=uvloop or =asyncio picks the loop of every process that reads it
(to compare, or for a service whose engine is light); a machine without uvloop runs
asyncio's. Any other value is refused, naming the variable.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable

VARIABLE = "STARMESH_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def loop_factory(default: str = "asyncio") -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes this process's event loops: STARMESH_EVENT_LOOP when set, else
    `default` (the process's role: "uvloop" for a message mover)."""
    choice = os.environ.get(VARIABLE, "") or default
    if choice not in CHOICES:
        raise ValueError(f"{VARIABLE}={choice!r}: must be one of {', '.join(CHOICES)}")
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError:  # an install without it: asyncio's loop serves the same
            return asyncio.new_event_loop
        return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop(default: str = "asyncio") -> asyncio.AbstractEventLoop:
    return loop_factory(default)()


def run(main: Awaitable[Any], default: str = "asyncio") -> Any:
    """asyncio.run(main) on this process's event loop."""
    try:
        factory = loop_factory(default)
    except ValueError:
        if asyncio.iscoroutine(main):
            main.close()  # never to run: no "never awaited" warning beside the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def name(loop: asyncio.AbstractEventLoop) -> str:
    """'uvloop' or 'asyncio': which loop `loop` is (each server logs it)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
