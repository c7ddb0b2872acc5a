"""`starmesh.v1.Component` servicer: converts and enqueues, nothing else.

Per Run stream: a reader task converts each RunRequest (`runtime.item_proto`) and
submits its items to the step loop; the handler itself is the writer, yielding
the RunResponses the engine thread puts on the stream's asyncio queue (one per
engine step). When the client half-closes, the stream ends once the node runs
it opened have ended (NodeDone/NodeError); when it breaks, at once. Either way
the step loop then cancels what the stream carried and frees the leases it
carried (`transport.release_carrier`). A message that does not decode (or fails
validation as a whole) ends the stream with its error's status, INVALID_ARGUMENT;
a bad item inside a good message fails only that item's request (a NodeError).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import grpc

from protos.starmesh.v1 import component_pb2, component_pb2_grpc
from runtime import item_proto as wire
from runtime.component import Component
from runtime.edge_stats import now_us
from runtime.grpc_status import map_errors
from runtime.heartbeat import DEFAULT_INTERVAL_S, beat
from runtime.message_split import oversized_error, split
from runtime.output_batch import OutputGroup, OutputRows, group
from runtime.items import NodeError, NodeOutput, OutboundEvent
from runtime.step_loop import StepLoop
from core.errors import StarmeshError

log = logging.getLogger(__name__)

_END = object()  # end the response stream
# Messages queued for the engine thread past which a stream's reader stops reading: the
# sender then waits on gRPC flow control instead of filling this process's memory.
MAX_QUEUED = 1024
_QUEUE_POLL_S = 0.002


def _events_to_proto(units: list) -> component_pb2.RunResponse:
    """Converts one step's wire units (runtime.output_batch.group); an event that cannot
    be converted (metadata that is not a Struct) becomes a NodeError instead of losing
    the whole batch."""
    try:
        return wire.units_to_proto(units)
    except Exception:
        safe = []
        for ev in units:
            try:
                wire.units_to_proto([ev])
                safe.append(ev)
            except Exception as e:
                log.exception("cannot convert %s of request %s", type(ev).__name__, ev.request_id)
                node = getattr(ev, "node", "")
                where = "output.metadata" if isinstance(ev, NodeOutput) else type(ev).__name__
                safe.append(NodeError(ev.request_id, node, "INTERNAL", f"{where}: {e}"))
        return wire.units_to_proto(safe)  # unit for unit: split's indices still name them


class ComponentServicer(component_pb2_grpc.ComponentServicer):
    def __init__(self, component: Component, transport: Any, step_loop: StepLoop, version: str,
                 heartbeat_s: float = DEFAULT_INTERVAL_S, max_message_bytes: int = 64 << 20) -> None:
        """heartbeat_s: how often each Run stream lists the requests known on it;
        max_message_bytes: the server's send limit (no RunResponse passes it)."""
        self._heartbeat_s = heartbeat_s
        self._max_message_bytes = max_message_bytes
        self._component = component
        self._transport = transport
        self._step_loop = step_loop
        self._version = version

    @map_errors
    async def Describe(self, request, context) -> component_pb2.ComponentInfo:
        info = component_pb2.ComponentInfo(
            name=self._component.name,
            nodes=list(self._component.nodes),
            host_id=self._transport.host_id,
            arena=self._transport.arena_name or "",
            mooncake_session=self._transport.mooncake_session or "",
            version=self._version,
            transport=self._transport_stats(),
            num_open_requests=self._step_loop.num_open_requests,
        )
        load = getattr(self._component, "load", None)
        if load is not None:  # read without the engine thread: a momentary view
            info.load.update({k: float(v) for k, v in load().items()})
        return info

    def _transport_stats(self) -> component_pb2.TransportStats:
        stats = self._transport.stats()
        return component_pb2.TransportStats(
            num_leases=stats.get("num_leases", 0),
            used_bytes=stats.get("used_bytes", 0),
            arena_bytes=stats.get("arena_bytes", 0),
        )

    @map_errors
    async def Run(self, request_iterator, context):
        stream_id = f"run-{uuid.uuid4().hex}"
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue = asyncio.Queue()
        calls = self._step_loop.loop_calls

        def sink(events: list[OutboundEvent] | None) -> None:  # engine thread
            for msg in [_END] if events is None else self._frames(events):
                calls.call(loop, outbox.put_nowait, msg)

        self._step_loop.attach(stream_id, sink)
        reader = asyncio.create_task(self._read(request_iterator, stream_id, outbox))
        heartbeat = asyncio.create_task(beat(lambda: self._step_loop.known_requests(stream_id),
                                             lambda alive: outbox.put_nowait(wire.events_to_proto([alive])),
                                             self._heartbeat_s))
        try:
            while True:
                msg = await outbox.get()
                if msg is _END:
                    return
                if isinstance(msg, StarmeshError):  # the client's stream was malformed
                    raise msg
                yield msg
        finally:
            reader.cancel()
            heartbeat.cancel()
            self._step_loop.detach(stream_id)

    def _frames(self, events: list[OutboundEvent]) -> list[component_pb2.RunResponse]:
        """One step's events as RunResponses within the message limit; an event too
        large alone (an inline output) fails its request instead."""
        units = group(events)
        parts, oversized = split(_events_to_proto(units), "events", self._max_message_bytes)
        if oversized:
            errors = [oversized_error(ev, self._max_message_bytes) for i in oversized
                      for ev in (units[i].outputs if isinstance(units[i], (OutputGroup, OutputRows)) else [units[i]])]
            parts.append(wire.events_to_proto(errors))
        return parts

    async def _read(self, request_iterator, stream_id: str, outbox: asyncio.Queue) -> None:
        named = False
        try:
            async for request in request_iterator:
                if request.sender and not named:  # a producer's runtime: its peer stream
                    self._step_loop.name_stream(stream_id, request.sender[:200])
                    named = True
                self._step_loop.submit(stream_id, wire.request_from_proto(request, now_us()))
                while self._step_loop.num_queued > MAX_QUEUED:
                    await asyncio.sleep(_QUEUE_POLL_S)
        except asyncio.CancelledError:
            raise
        except StarmeshError as e:  # bytes that do not decode (runtime.decode_guard)
            log.info("Run stream %s: %s", stream_id, e)
            outbox.put_nowait(e)  # the writer ends the stream with its status
            return
        except grpc.aio.BaseError as e:  # grpc's own: the server stopped under the read (a stop
            # while peers still stream), not a fault of this stream: no traceback in the log
            log.info("Run stream %s ended while reading: %s", stream_id, type(e).__name__)
            outbox.put_nowait(_END)
            return
        except Exception:
            log.info("Run stream %s broke while reading", stream_id, exc_info=True)
            outbox.put_nowait(_END)  # broken: end now (the handler's finally detaches)
            return
        self._step_loop.finish(stream_id)  # half-closed: end after the open runs end
