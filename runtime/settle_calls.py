"""The last step of a graceful stop: the tasks of the calls it cancelled end.

grpc.aio ends each cancelled call's task a loop turn or two after `Server.stop` returns.
A process that closes its event loop before then cancels those tasks itself, and grpc
logs every one as "Exception not handled by _handle_exceptions" with a traceback: an
ERROR in a stop where nothing failed (a Run stream or a health watch a peer still held).
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

# grpc.aio's per-call task; a grpc that names it otherwise is simply not waited for
_CALL_TASK = "_schedule_rpc_coro"


async def settle_calls(timeout_s: float) -> int:
    """Waits (at most timeout_s) for the per-call tasks of a stopped grpc.aio server in
    this loop; returns how many had not ended by then."""
    me = asyncio.current_task()
    calls = [t for t in asyncio.all_tasks() if t is not me and _is_call_task(t)]
    if not calls:
        return 0
    _, pending = await asyncio.wait(calls, timeout=timeout_s)
    if pending:
        log.debug("%d call(s) still ending %.1f s after the server stopped", len(pending), timeout_s)
    return len(pending)


def _is_call_task(task: asyncio.Task) -> bool:
    return getattr(task.get_coro(), "__qualname__", "") == _CALL_TASK
