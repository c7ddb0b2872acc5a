"""`starmesh.v1` Run messages <-> `runtime.items` (the gRPC edge of the services).

Both directions exist for both sides: a service reads RunRequest and writes
RunResponse; a client of a service (the conductor, a relay) does the reverse.
Conversion validates; errors are `InvalidArgument` whose message names the field
as it appears on the wire, e.g. "items[2].open.inputs[x].shape".

Repeated fields are read as `tuple(field[:])`: the slice copies them in C, less than
half the cost of iterating the container (these run once per streamed item).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import grpc
from google.protobuf import struct_pb2

from protos.starmesh.v1 import component_pb2 as pb
from runtime.items import (
    AcceptRoute,
    Cancel,
    ChunkInfo,
    StreamInput,
    Credit,
    ConsumedLease,
    ContextOp,
    InboundItem,
    NodeDone,
    NodeError,
    NodeOutput,
    OpenNode,
    OutboundEvent,
    PushChunk,
    Release,
    Repace,
    RouteCredit,
    Alive,
    StopRule,
)
from runtime.output_batch import OutputGroup, OutputRows, group, group_to_proto, outputs_from_proto, rows_to_proto
from runtime.push_batch import PushBatch
from runtime.push_batch_proto import batch_from_proto, batch_to_proto
from runtime.route_proto import MAX_WINDOW, routes_from_proto, routes_to_proto
from core.context_use import ContextUse
from core.errors import BadTensorRef, InvalidArgument, StarmeshError
from core.pace import Pace
from transport.refs import TensorRef
from transport.ref_proto import UnnamedRefError, read_ref, ref_to_proto


@dataclass(frozen=True)
class Rejected:
    """An inbound item that failed conversion; the service answers it with a NodeError."""

    request_id: str
    node: str
    status: str  # grpc.StatusCode name
    message: str


def status_value(name: str) -> int:
    """grpc.StatusCode name -> its integer value (unknown names map to INTERNAL)."""
    code = grpc.StatusCode.__members__.get(name, grpc.StatusCode.INTERNAL)
    return code.value[0]


def status_name(value: int) -> str:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.name
    return "UNKNOWN"


def params_to_struct(params: dict[str, Any], out: struct_pb2.Struct, field: str = "params") -> None:
    try:
        out.update(params)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{field}: not representable as google.protobuf.Struct: {e}") from None


def params_from_struct(msg: struct_pb2.Struct, field: str = "params") -> dict[str, Any]:
    """A Struct as plain Python values; a Value with none of its kinds set (which a
    Struct's own accessors answer with a bare ValueError) is InvalidArgument naming it."""
    # Struct numbers are doubles on the wire: 3 comes back as 3.0. Walked directly (not
    # json_format, several times slower on the per-output metadata); NaN and infinities
    # stay floats for the node to judge.
    return {k: _plain(v, field, k) for k, v in msg.fields.items()}


_SCALARS = frozenset({"number_value", "string_value", "bool_value"})


def _plain(value: struct_pb2.Value, parent: str, key: str | int) -> Any:
    """The value at `parent`.key (`parent`[key] for a list index); the field's name is
    built only where it is needed (per output metadata is read here)."""
    kind = value.WhichOneof("kind")
    if kind in _SCALARS:
        return getattr(value, kind)
    field = f"{parent}[{key}]" if isinstance(key, int) else f"{parent}.{key}"
    if kind == "struct_value":
        return params_from_struct(value.struct_value, field)
    if kind == "list_value":
        return [_plain(v, field, i) for i, v in enumerate(value.list_value.values)]
    if kind == "null_value":
        return None
    if kind is None:
        raise InvalidArgument(f"{field} has no value (none of null, number, string, bool, struct, list is set)")
    return getattr(value, kind)


def tensors_from_proto(named: Sequence, field: str) -> dict[str, TensorRef]:
    out: dict[str, TensorRef] = {}
    for i, nt in enumerate(named[:]):
        name = nt.name  # each read of a proto string field makes a new str: once per tensor
        if not name:
            raise InvalidArgument(f"{field}[{i}].name is empty")
        if name in out:
            raise InvalidArgument(f"{field}[{name}]: duplicate tensor name")
        if not nt.HasField("tensor"):
            raise InvalidArgument(f"{field}[{name}].tensor is not set")
        try:
            out[name] = read_ref(nt.tensor)
        except UnnamedRefError as e:
            raise BadTensorRef(f"{field}[{name}]{e}") from None
    return out


def tensors_to_proto(tensors: dict[str, TensorRef], out) -> None:
    for name, ref in tensors.items():
        nt = out.add(name=name)
        ref_to_proto(ref, nt.tensor)


# ---- inbound: RunRequest ------------------------------------------------------


def _open_from_proto(m: pb.OpenNode, field: str) -> OpenNode:
    return OpenNode(
        request_id=m.request_id,
        node=m.node,
        walk=m.walk,
        iteration=tuple(m.iteration[:]),
        inputs=tensors_from_proto(m.inputs, f"{field}.inputs"),
        params=params_from_struct(m.params, f"{field}.params"),
        stop_rule=StopRule(stop_token_ids=tuple(m.stop_rule.stop_token_ids[:]), component_predicate=m.stop_rule.predicate),
        traceparent=m.traceparent,
        tracestate=m.tracestate,
        consumer_host_ids=tuple(m.consumer_host_ids[:]),
        credits=dict(m.credits),
        chunk=ChunkInfo(m.chunk.start, m.chunk.num_context, m.chunk.is_last, m.chunk.num_pad)
        if m.HasField("chunk") else None,
        stream=StreamInput(m.stream.port, m.stream.continue_after_producer_done) if m.HasField("stream") else None,
        routes=routes_from_proto(m.routes, field),
        quiet_ports=tuple(m.quiet_ports[:]),
        max_iters=m.stop_rule.max_iters,
        pace=_pace_from_proto(m.pace, field) if m.HasField("pace") else None,
        contexts=_contexts_from_proto(m.contexts, field) if len(m.contexts) else (),
        client_ports=tuple(m.client_ports[:]),
    )


def _contexts_from_proto(contexts, field: str) -> tuple[ContextUse, ...]:
    out = []
    for i, c in enumerate(contexts):
        try:
            out.append(ContextUse(c.read_id, c.keep_id, c.owner, c.slot))
        except InvalidArgument as e:  # names contexts.<field>
            raise InvalidArgument(f"{field}.{e}".replace(".contexts.", f".contexts[{i}].", 1)) from None
    return tuple(out)


def _pace_from_proto(m: pb.Pace, field: str) -> Pace:
    try:
        return Pace(m.origin_unix_s, m.item_s, m.first_item, m.lead_items)
    except ValueError as e:  # names pace.<field>
        raise InvalidArgument(f"{field}.{e}") from None


def _repace_from_proto(m: pb.Repace, field: str) -> Repace:
    if not m.request_id or not math.isfinite(m.origin_unix_s):
        raise InvalidArgument(f"{field}: request_id is required and origin_unix_s must be finite")
    return Repace(m.request_id, m.origin_unix_s)


def _push_from_proto(m: pb.PushChunk, field: str, received_us: float) -> PushChunk:
    if not m.request_id or not m.node:
        raise InvalidArgument(f"{field}: request_id and node are required")
    tensors = tensors_from_proto(m.tensors, f"{field}.tensors")
    return PushChunk(m.request_id, m.node, m.port, tuple(m.iteration[:]), tensors, m.end_of_stream,
                     m.num_context, m.num_pad, m.route, m.start, tuple(m.produced_us[:]), received_us)


def _accept_from_proto(m: pb.AcceptRoute, field: str) -> AcceptRoute:
    if not 1 <= m.window <= MAX_WINDOW:
        raise InvalidArgument(f"{field}.window must be in [1, {MAX_WINDOW}], got {m.window}")
    return AcceptRoute(m.token, _open_from_proto(m.run, f"{field}.run"), m.port, m.push, m.edge, m.window,
                       m.per_item)


def item_from_proto(msg: pb.RunItem, field: str, received_us: float = 0.0) -> InboundItem:
    """Converts one RunItem; raises StarmeshError naming `field`. received_us: when its
    message was read (a push keeps it: the consumer's share of the edge's latency)."""
    kind = msg.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(f"{field}: none of open, push, batch, cancel, release, credit, accept, repace, "
                              "context_op is set")
    sub = getattr(msg, kind)
    try:
        if kind == "open":
            return _open_from_proto(sub, f"{field}.open")
        if kind == "push":
            return _push_from_proto(sub, f"{field}.push", received_us)
        if kind == "batch":
            return batch_from_proto(sub, f"{field}.batch", received_us)
        if kind == "cancel":
            return Cancel(sub.request_id, sub.reason)
        if kind == "credit":
            return Credit(sub.request_id, sub.node, sub.port, sub.amount, tuple(sub.iteration[:]))
        if kind == "accept":
            return _accept_from_proto(sub, f"{field}.accept")
        if kind == "repace":
            return _repace_from_proto(sub, f"{field}.repace")
        if kind == "context_op":
            return ContextOp(sub.context_id, sub.owner, sub.keep_tokens)
        return Release(sub.request_id, tuple(sub.lease_ids[:]))
    except ValueError as e:  # dataclass validation ("open.request_id is empty")
        raise InvalidArgument(f"{field}.{e}") from None


def request_from_proto(msg: pb.RunRequest, received_us: float = 0.0) -> list[tuple[str, InboundItem | Rejected]]:
    """Converts every item; a bad item becomes `Rejected` so the others still run.
    received_us: when the message was read off its stream (see item_from_proto).

    Returns (field path, item) pairs; the path ("items[3].open") prefixes later errors.
    """
    out: list[tuple[str, InboundItem | Rejected]] = []
    for i, item in enumerate(msg.items):
        field = f"items[{i}]"
        try:
            out.append((field, item_from_proto(item, field, received_us)))
        except StarmeshError as e:
            kind = item.WhichOneof("kind")
            sub = getattr(item, kind) if kind else None
            sub = sub.run if kind == "accept" else sub
            request_id = getattr(sub, "request_id", "")
            node = getattr(sub, "node", "")
            out.append((field, Rejected(request_id, node, e.status, str(e))))
    return out


def _open_to_proto(item: OpenNode, o: pb.OpenNode) -> None:
    o.request_id, o.walk, o.node = item.request_id, item.walk, item.node
    o.iteration.extend(item.iteration)
    tensors_to_proto(item.inputs, o.inputs)
    params_to_struct(item.params, o.params, "open.params")
    o.stop_rule.max_iters = item.max_iters  # the wire keeps the loop's bound with its stop rule
    o.stop_rule.stop_token_ids.extend(item.stop_rule.stop_token_ids)
    o.stop_rule.predicate = item.stop_rule.component_predicate
    o.traceparent, o.tracestate = item.traceparent, item.tracestate
    o.consumer_host_ids.extend(item.consumer_host_ids)
    o.credits.update(item.credits)
    if item.chunk is not None:
        c = item.chunk
        o.chunk.start, o.chunk.num_context, o.chunk.is_last, o.chunk.num_pad = (
            c.start, c.num_context, c.is_last, c.num_pad)
    if item.stream is not None:
        o.stream.port = item.stream.port
        o.stream.continue_after_producer_done = item.stream.continue_after_producer_done
    routes_to_proto(item.routes, o.routes)
    o.quiet_ports.extend(item.quiet_ports)
    if item.pace is not None:
        p = item.pace
        o.pace.origin_unix_s, o.pace.item_s, o.pace.first_item, o.pace.lead_items = (
            p.origin_s, p.item_s, p.first_item, p.lead_items)
    for c in item.contexts:
        o.contexts.add(read_id=c.read_id, keep_id=c.keep_id, owner=c.owner, slot=c.slot)
    o.client_ports.extend(item.client_ports)


def items_to_proto(items: Iterable[InboundItem], sender: str = "") -> pb.RunRequest:
    """Client side: builds one RunRequest from items whose tensors are TensorRefs."""
    msg = pb.RunRequest(sender=sender)
    for item in items:
        it = msg.items.add()
        if isinstance(item, OpenNode):
            _open_to_proto(item, it.open)
        elif isinstance(item, AcceptRoute):
            a = it.accept
            a.token, a.port, a.push, a.edge, a.window = item.token, item.port, item.push, item.edge, item.window
            a.per_item = item.per_item
            _open_to_proto(item.run, a.run)
        elif isinstance(item, PushChunk):
            p = it.push
            p.request_id, p.node, p.port, p.end_of_stream = item.request_id, item.node, item.port, item.end_of_stream
            p.iteration.extend(item.iteration)
            p.num_context, p.num_pad = item.num_context, item.num_pad
            p.route, p.start = item.route, item.start
            p.produced_us.extend(item.produced_us)
            tensors_to_proto(item.tensors, p.tensors)
        elif isinstance(item, PushBatch):
            batch_to_proto(item, it.batch)
        elif isinstance(item, Cancel):
            it.cancel.request_id, it.cancel.reason = item.request_id, item.reason
        elif isinstance(item, Repace):
            it.repace.request_id, it.repace.origin_unix_s = item.request_id, item.origin_s
        elif isinstance(item, ContextOp):
            op = it.context_op
            op.context_id, op.owner, op.keep_tokens = item.context_id, item.owner, item.keep_tokens
        elif isinstance(item, Release):
            it.release.request_id = item.request_id
            it.release.lease_ids.extend(item.lease_ids)
        elif isinstance(item, Credit):
            c = it.credit
            c.request_id, c.node, c.port, c.amount = item.request_id, item.node, item.port, item.amount
            c.iteration.extend(item.iteration)
        else:
            raise TypeError(f"not a Run item: {type(item).__name__}")
    return msg


# ---- outbound: RunResponse ----------------------------------------------------


def events_to_proto(events: Iterable[OutboundEvent]) -> pb.RunResponse:
    """Service side: NodeOutput tensors must already be exported TensorRefs. Consecutive
    outputs that can share one OutputBatch do (runtime.output_batch)."""
    return units_to_proto(group(list(events)))


def units_to_proto(units: Iterable) -> pb.RunResponse:
    """One RunEvent per unit of runtime.output_batch.group: an event, or an OutputGroup."""
    msg = pb.RunResponse()
    for ev in units:
        e = msg.events.add()
        if isinstance(ev, OutputGroup):
            group_to_proto(ev, e.outputs)
        elif isinstance(ev, OutputRows):
            rows_to_proto(ev, e.outputs)
        elif isinstance(ev, NodeOutput):
            o = e.output
            o.request_id, o.node = ev.request_id, ev.node
            o.iteration.extend(ev.iteration)
            tensors_to_proto(ev.tensors, o.outputs)
            o.produced_us = ev.produced_us
            if ev.metadata:
                params_to_struct(ev.metadata, o.metadata, "output.metadata")
        elif isinstance(ev, NodeError):
            r = e.error
            r.request_id, r.node, r.message = ev.request_id, ev.node, ev.message
            r.code = status_value(ev.status)
            r.iteration.extend(ev.iteration)
        elif isinstance(ev, NodeDone):
            e.done.request_id, e.done.node = ev.request_id, ev.node
            e.done.iteration.extend(ev.iteration)
            for c in ev.consumed:
                e.done.consumed.add(arena=c.arena, lease_id=c.lease_id)
            if ev.metadata:
                params_to_struct(ev.metadata, e.done.metadata, "done.metadata")
        elif isinstance(ev, Alive):
            e.alive.request_ids.extend(ev.request_ids)
        elif isinstance(ev, RouteCredit):
            c = e.credit
            c.request_id, c.token, c.amount = ev.request_id, ev.token, ev.amount
            c.lease_ids.extend(ev.lease_ids)
        else:
            raise TypeError(f"not a Run event: {type(ev).__name__}")
    return msg


def events_from_proto(msg: pb.RunResponse, rows: bool = False) -> list[OutboundEvent]:
    """Client side: NodeOutput.tensors hold TensorRefs (resolve them with a Transport).
    An event that cannot be read fails its own request (a NodeError naming the field),
    never the stream that carries the others. rows: a batch of outputs comes as one
    runtime.received_rows.ReceivedRows (else each output is its own NodeOutput again)."""
    out: list[OutboundEvent] = []
    for i, e in enumerate(msg.events):
        if e.HasField("outputs"):
            out += outputs_from_proto(e.outputs, f"events[{i}].outputs", rows)
            continue
        try:
            out.append(_event_from_proto(e, f"events[{i}]"))
        except StarmeshError as err:
            kind = e.WhichOneof("kind")
            sub = getattr(e, kind) if kind else None
            out.append(NodeError(getattr(sub, "request_id", ""), getattr(sub, "node", ""), err.status,
                                 f"events[{i}]: {err}", tuple(getattr(sub, "iteration", ()))))
    return out


def _event_from_proto(e: pb.RunEvent, where: str) -> OutboundEvent:
    kind = e.WhichOneof("kind")
    if kind == "output":
        o = e.output
        tensors = tensors_from_proto(o.outputs, f"{where}.output.outputs")
        metadata = params_from_struct(o.metadata, f"{where}.output.metadata") if o.HasField("metadata") else {}
        return NodeOutput(o.request_id, o.node, tensors, tuple(o.iteration[:]), metadata, o.produced_us)
    if kind == "error":
        r = e.error
        return NodeError(r.request_id, r.node, status_name(r.code), r.message, tuple(r.iteration[:]))
    if kind == "done":
        d = e.done
        consumed = tuple(ConsumedLease(c.arena, c.lease_id) for c in d.consumed)
        return NodeDone(d.request_id, d.node, consumed, tuple(d.iteration[:]),
                        params_from_struct(d.metadata, f"{where}.done.metadata"))
    if kind == "credit":
        c = e.credit
        return RouteCredit(c.request_id, c.token, c.amount, tuple(c.lease_ids[:]))
    if kind == "alive":
        return Alive(tuple(e.alive.request_ids[:]))
    raise InvalidArgument(f"{where}: none of output, outputs, error, done, credit, alive is set")
