"""The RPCs a stranger can reach, and how one call of raw bytes is sent and judged.

Calls go through a generic bytes-in stub (`request_serializer=None`): the payload is
put on the wire as given, so the server's own decoding is what is attacked. A call's
outcome is its status name, plus, for `Component.Run`, the status of every NodeError the
stream carried (an item-level failure must be as precise as a stream-level one).
"""
from __future__ import annotations

from dataclasses import dataclass

import grpc

# What a bad input may be answered with; OK where the message was legitimately valid.
ALLOWED = frozenset({"OK", "INVALID_ARGUMENT", "OUT_OF_RANGE", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED",
                     "UNAUTHENTICATED", "NOT_FOUND"})
MAX_MESSAGE_BYTES = 256 << 20  # the client's own limits: the server's are under test


@dataclass(frozen=True)
class Rpc:
    """target: the mesh endpoint ("conductor", "service", "trace_store"); kind: unary,
    server_stream or bidi."""

    target: str
    method: str
    kind: str


GENERATE = Rpc("conductor", "/starmesh.v1.Conductor/Generate", "server_stream")
LIST_MODELS = Rpc("conductor", "/starmesh.v1.Conductor/ListModels", "unary")
HEALTH = Rpc("conductor", "/grpc.health.v1.Health/Check", "unary")
RUN = Rpc("service", "/starmesh.v1.Component/Run", "bidi")
DESCRIBE = Rpc("service", "/starmesh.v1.Component/Describe", "unary")
EXPORT = Rpc("trace_store", "/opentelemetry.proto.collector.trace.v1.TraceService/Export", "unary")
RPCS = (GENERATE, LIST_MODELS, HEALTH, RUN, DESCRIBE, EXPORT)


@dataclass(frozen=True)
class FuzzCall:
    """One call: payload holds one message (several for the Run stream); origin says
    which generator made it (random, truncated, bitflip, hostile, ...)."""

    rpc: Rpc
    payload: tuple[bytes, ...]
    origin: str

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.payload)


@dataclass(frozen=True)
class Outcome:
    call: FuzzCall
    status: str  # the call's grpc status name
    details: str
    node_errors: tuple[tuple[str, str], ...] = ()  # Run: each NodeError's (status, message)

    @property
    def is_bad(self) -> bool:
        return self.status not in ALLOWED or any(s not in ALLOWED for s, _ in self.node_errors)


def channel_options() -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]


def send(channel: grpc.Channel, call: FuzzCall, timeout_s: float) -> Outcome:
    """Sends one call and waits for its end (at most timeout_s: DEADLINE_EXCEEDED is bad)."""
    rpc = call.rpc
    try:
        if rpc.kind == "unary":
            channel.unary_unary(rpc.method)(call.payload[0], timeout=timeout_s)
            return Outcome(call, "OK", "")
        if rpc.kind == "server_stream":
            # A stream that yields has accepted its request: that is the verdict; it is
            # cancelled there (a valid request's whole generation is not what is tested).
            stream = channel.unary_stream(rpc.method)(call.payload[0], timeout=timeout_s)
            next(stream, None)
            stream.cancel()
            return Outcome(call, "OK", "")
        responses = list(channel.stream_stream(rpc.method)(iter(call.payload), timeout=timeout_s))
        return Outcome(call, "OK", "", _run_errors(responses))
    except grpc.RpcError as e:
        return Outcome(call, e.code().name, e.details() or "")


def _run_errors(responses: list[bytes]) -> tuple[tuple[str, str], ...]:
    from protos.starmesh.v1 import component_pb2
    from runtime.item_proto import status_name

    out = []
    for raw in responses:
        msg = component_pb2.RunResponse.FromString(raw)
        out += [(status_name(e.error.code), e.error.message) for e in msg.events if e.WhichOneof("kind") == "error"]
    return tuple(out)
