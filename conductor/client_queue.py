"""`ClientQueue`: one request's walk outputs waiting for its client, and how it ended.

    queue.extend(outputs)        # the outputs one event batch made, at once (a RowsView: several)
    queue.end(END | Failure)     # the first end wins; nothing is queued after it
    outputs, end = await queue.take()   # everything queued so far (end: None while running)

One wake-up of the client's task per event batch, however many outputs it made (an
asyncio.Queue would wake it, and be locked and counted, once per output).
"""
from __future__ import annotations

import asyncio
from typing import Any

from runtime.received_rows import RowsView


class ClientQueue:
    def __init__(self) -> None:
        self._items: list[tuple[str, Any]] = []
        self._count = 0  # outputs queued: a RowsView counts each of its entries
        self._end: Any = None  # END or a Failure once the request ended
        self._waiter: asyncio.Future | None = None

    def __len__(self) -> int:
        """Outputs queued, not yet taken (the client's backlog)."""
        return self._count

    def extend(self, outputs: list[tuple[str, Any]]) -> None:
        """outputs: (name, value), a value a RowsView of several outputs of that name."""
        if outputs and self._end is None:
            self._items += outputs
            self._count += sum(len(v) if isinstance(v, RowsView) else 1 for _, v in outputs)
            self._wake()

    def end(self, end: Any) -> None:
        """The request ended (END, or the Failure that ended it); later ends are ignored."""
        if self._end is None:
            self._end = end
            self._wake()

    async def take(self) -> tuple[list[tuple[str, Any]], Any]:
        """(every output queued since the last take, in order; the end, or None while the
        request runs). Waits until there is at least one of them."""
        while not self._items and self._end is None:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        items, self._items, self._count = self._items, [], 0
        return items, self._end

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
