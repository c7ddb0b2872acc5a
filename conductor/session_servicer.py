"""`Sessions.Session` on the conductor's server: one bidirectional stream is one session
(conductor.session_core). Thin: converts inputs and events (conductor.session_proto),
runs each turn through the conductor's own Generate path (conductor.session_generate),
and bounds what sessions hold (conductor.session_limits):

- past max_sessions open, a new stream ends at once with RESOURCE_EXHAUSTED;
- a session with no input and no response running for idle_timeout_s ends with
  DEADLINE_EXCEEDED; a client that reads none of its events while they pile up past
  max_unread_events ends with RESOURCE_EXHAUSTED, its response cancelled at once;
- however it ends (the client closes its side: after the running response; a
  disconnect; expiry), its response is cancelled and its kept context released.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from conductor.kept_contexts import owner_of
from conductor.session_core import Session, SessionModel
from conductor.session_generate import turn_runner
from conductor.session_limits import SessionLimits
from conductor.session_proto import event_to_proto, input_from_proto
from core.errors import InvalidArgument, ResourceExhausted, StarmeshError
from protos.starmesh.v1 import session_pb2 as pb
from protos.starmesh.v1 import session_pb2_grpc
from runtime.grpc_status import map_errors
from runtime.items import ContextOp

log = logging.getLogger(__name__)
SESSIONS_SERVICE = pb.DESCRIPTOR.services_by_name["Sessions"].full_name
_END = object()


class Expired(StarmeshError):
    status = "DEADLINE_EXCEEDED"


class SessionsServicer(session_pb2_grpc.SessionsServicer):
    def __init__(self, service, conductor, limits: SessionLimits) -> None:
        """service: the ConductorService (models, tokenizers, executors, kept contexts);
        conductor: its ConductorServicer (each turn is one of its Generate requests)."""
        self.service, self.conductor, self.limits = service, conductor, limits
        self.open: dict[str, Session] = {}

    def model(self, name: str) -> SessionModel | None:
        m = self.service.served.get(name)
        if m is None or "text" not in m.output_kinds.values() or not m.decode_text:
            return None
        return SessionModel(m.name, self.service.tokenizers.get(m.name), "audio" in m.output_kinds.values(),
                            m.voice_param, tuple(m.voices))

    def context_op(self, owner: str):
        def send(model: str, context_id: str, keep_tokens: int) -> None:
            executor, targets = self.service.executors.get(model), self.service.targets.get(model)
            if executor is None or targets is None:
                return
            # where it was kept; unknown (a cancelled turn's): every replica (one without it ignores the op)
            holders = self.service.contexts.directory.holders(context_id)
            chosen = [targets[e] for e in holders if e in targets] or list(targets.values())
            executor.send_now(chosen, ContextOp(context_id, owner, keep_tokens))

        return send

    @map_errors
    async def Session(self, request_iterator, context: grpc.aio.ServicerContext):
        if len(self.open) >= self.limits.max_sessions:
            # its configure is read first (for a moment at most): a status sent while the
            # client still writes it reaches some clients as an INTERNAL write failure instead
            with contextlib.suppress(Exception):
                await asyncio.wait_for(anext(aiter(request_iterator), None), 2.0)
            raise ResourceExhausted(f"this conductor holds {self.limits.max_sessions} sessions (max_sessions); "
                                    "retry when one ends")
        # headers at once: a client may wait for them before it writes (a refusal, sent
        # while it writes, can reach it as an INTERNAL write failure instead of its status)
        await context.send_initial_metadata(())
        events: asyncio.Queue = asyncio.Queue()
        metadata = context.invocation_metadata()

        def emit(ev) -> None:
            if unread_past[0]:
                return  # the session is over: the client reads the refusal next
            if events.qsize() >= self.limits.max_unread_events:  # it holds nothing in the engines meanwhile
                unread_past[0] = True
                events.put_nowait(ResourceExhausted(f"the client left {self.limits.max_unread_events} session "
                                                    "events unread (max_unread_events)"))
                asyncio.get_running_loop().create_task(session.close())
                return
            events.put_nowait(ev)

        unread_past = [False]
        session = Session(self.model, turn_runner(self.conductor, metadata), self.context_op(owner_of(metadata)),
                          self.limits, emit)
        self.open[session.id] = session
        driver = asyncio.get_running_loop().create_task(self._drive(session, request_iterator, events))
        try:
            while (ev := await events.get()) is not _END:
                if isinstance(ev, StarmeshError):
                    raise ev
                yield event_to_proto(session.new_id("event"), ev)
        finally:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
            self.open.pop(session.id, None)
            await session.close()

    async def _drive(self, session: Session, request_iterator, events: asyncio.Queue) -> None:
        """Reads the client's inputs (a task of their own: a read is never cancelled) and
        applies them in order; ends the session when they end or it stays idle too long."""
        inputs: asyncio.Queue = asyncio.Queue()

        async def read() -> None:
            try:
                async for message in request_iterator:
                    await inputs.put(message)
            finally:
                await inputs.put(_END)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                try:  # asyncio.timeout, not wait_for: a cancel that meets a ready input is not lost
                    async with asyncio.timeout(self.limits.idle_timeout_s):
                        message = await inputs.get()
                except TimeoutError:
                    if session.is_busy:
                        continue
                    events.put_nowait(Expired(f"the session was idle for {self.limits.idle_timeout_s:g} s "
                                              "(idle_timeout_s)"))
                    return
                if message is _END:
                    break
                await self._apply(session, message)
            if session.is_busy:  # the client closed its side: its response still ends
                await session.response.wait()
            events.put_nowait(_END)
        finally:
            reader.cancel()

    @staticmethod
    async def _apply(session: Session, message: pb.SessionInput) -> None:
        rate = session.state.input_sample_rate if session.state else 24000
        try:
            inp = input_from_proto(message, rate)
        except InvalidArgument as e:
            from conductor.session_core import failure
            from core.session_events import Input

            session.emit(failure(e, Input(message.event_id, message.WhichOneof("kind") or "SessionInput")))
            return
        await session.handle(inp)


def add_sessions(server: grpc.aio.Server, servicer: SessionsServicer) -> None:
    session_pb2_grpc.add_SessionsServicer_to_server(servicer, server)
