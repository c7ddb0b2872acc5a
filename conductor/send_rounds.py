"""`SendRounds`: what the executor sends its targets, one message per target per round.

    rounds.send(target, item)     # goes with this round's message to target
    rounds.linger(target, item)   # may wait: goes with target's next message, or alone
                                  # within linger_s (0: with this round)
    rounds.flush()                # end of a round: one post per target that has items

Every message costs a write on a Run stream (tens of microseconds of the conductor's CPU,
whatever its size), so items that nobody waits for — the clean-up of a request that
finished — need not cost a message of their own: they ride with the next round that
writes to their target, which under load is soon (the next request's runs). Lingering
items always go first in a message, so a request id reused by a new request is cleaned
up on its target before the new request's runs reach it.
"""
from __future__ import annotations

import asyncio
from typing import Any

LINGER_S = 0.02  # the longest a lingering item waits for a message to ride with


class SendRounds:
    def __init__(self, linger_s: float = LINGER_S) -> None:
        if not linger_s >= 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s!r}")
        self.linger_s = linger_s
        self._round: dict[str, tuple[Any, list]] = {}  # target name -> (target, items of this round)
        self._lingering: dict[str, tuple[Any, list]] = {}  # target name -> (target, items that may wait)
        self._timer: asyncio.TimerHandle | None = None

    @property
    def num_lingering(self) -> int:
        return sum(len(items) for _, items in self._lingering.values())

    def send(self, target, item) -> None:
        self._round.setdefault(target.name, (target, []))[1].append(item)

    def linger(self, target, item) -> None:
        """linger_s 0: no waiting, the item goes with this round."""
        if not self.linger_s:
            return self.send(target, item)
        self._lingering.setdefault(target.name, (target, []))[1].append(item)

    def flush(self) -> None:
        """Posts this round: one message per target, its lingering items first."""
        round_, self._round = self._round, {}
        for name, (target, items) in round_.items():
            waiting = self._lingering.pop(name, None)
            target.post(waiting[1] + items if waiting else items)
        if self._lingering:
            self._arm()

    def flush_all(self) -> None:
        """Posts the lingering items too (their time is up, or the executor closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for name, (target, _) in self._lingering.items():
            self._round.setdefault(name, (target, []))  # flush() puts the lingering items first
        self.flush()

    def _arm(self) -> None:
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop to wait on: nothing lingers
            self.flush_all()
            return
        self._timer = loop.call_later(self.linger_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        self.flush_all()
