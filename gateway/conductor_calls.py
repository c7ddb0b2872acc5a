"""The gateway's calls to the conductor: one shared session, a deadline per request,
failures as ApiError, and streams primed with their first event, so that a request
refused before any output (bad input, capacity, a service down) is a real HTTP error
status and not a 200 whose body breaks off."""
from __future__ import annotations

from typing import AsyncIterator, Mapping

from client.call_failed import CallFailed
from client.events import Event
from client.generate_call import GenerateCall
from client.session import ConductorSession
from gateway.api_error import from_call_failed


class Primed:
    """A request's events with the first already received: `first`, then `rest()`.
    Closing it (always, in a finally) cancels the call if it is still running."""

    def __init__(self, first: Event | None, events: AsyncIterator[Event], fields: Mapping[str, str]) -> None:
        self.first, self._events, self._fields = first, events, fields

    async def rest(self) -> AsyncIterator[Event]:
        try:
            async for event in self._events:
                yield event
        except CallFailed as e:
            raise from_call_failed(e, self._fields) from None

    async def all(self) -> AsyncIterator[Event]:
        if self.first is not None:
            yield self.first
        async for event in self.rest():
            yield event

    async def close(self) -> None:
        await self._events.aclose()


class ConductorCalls:
    """session: the open ConductorSession; timeout_s: each request's deadline (504 past it)."""

    def __init__(self, session: ConductorSession, timeout_s: float) -> None:
        self.session = session
        self.timeout_s = timeout_s

    async def start(self, call: GenerateCall, authorization: str, fields: Mapping[str, str] = {}) -> Primed:
        """Sends the request and waits for its first event; ApiError if it fails first."""
        events = self.session.generate(call, authorization, self.timeout_s)
        try:
            first = await anext(events, None)
        except CallFailed as e:
            await events.aclose()
            raise from_call_failed(e, fields) from None
        except BaseException:
            await events.aclose()
            raise
        return Primed(first, events, fields)

