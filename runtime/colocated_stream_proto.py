"""ColocatedStream (co-located streaming edges) <-> starmesh.v1 `LocalStream` messages
(the wire keeps its field name `local_streams`)."""
from __future__ import annotations

from graph.chunking import ChunkPolicy, FixedChunk, LeftContext, SlidingWindow
from protos.starmesh.v1 import component_pb2 as pb
from runtime.items import ColocatedStream
from core.errors import InvalidArgument


def policy_to_proto(policy: ChunkPolicy, out: pb.ChunkPolicySpec) -> None:
    out.pad_final = policy.pad_final
    if isinstance(policy, FixedChunk):
        out.kind, out.size = "fixed", policy.size
    elif isinstance(policy, SlidingWindow):
        out.kind, out.size, out.stride = "sliding", policy.window, policy.stride
    elif isinstance(policy, LeftContext):
        out.kind, out.size, out.left, out.first = "left_context", policy.chunk, policy.left, policy.first
    else:
        raise TypeError(f"no wire form for chunk policy {policy!r}")


def policy_from_proto(m: pb.ChunkPolicySpec, field: str) -> ChunkPolicy:
    try:
        if m.kind == "fixed":
            return FixedChunk(m.size, m.pad_final)
        if m.kind == "sliding":
            return SlidingWindow(m.size, m.stride, m.pad_final)
        if m.kind == "left_context":
            return LeftContext(m.size, m.left, m.pad_final, m.first)
    except InvalidArgument as e:  # GraphError: the policy's own validation
        raise InvalidArgument(f"{field}: {e}") from None
    raise InvalidArgument(f"{field}.kind {m.kind!r} is not fixed, sliding or left_context")


def colocated_streams_to_proto(streams, out) -> None:
    for s in streams:
        m = out.add()
        m.src_port, m.dst_node, m.dst_port, m.max_buffered = s.src_port, s.dst_node, s.dst_port, s.max_buffered
        m.dst_iteration.extend(s.dst_iteration)
        policy_to_proto(s.policy, m.policy)


def colocated_streams_from_proto(msgs, field: str) -> tuple[ColocatedStream, ...]:
    out = []
    for i, m in enumerate(msgs):
        where = f"{field}.local_streams[{i}]"
        if not (m.src_port and m.dst_node and m.dst_port):
            raise InvalidArgument(f"{where}: src_port, dst_node and dst_port are required")
        out.append(ColocatedStream(m.src_port, m.dst_node, m.dst_port, policy_from_proto(m.policy, f"{where}.policy"),
                               tuple(m.dst_iteration), m.max_buffered or 4096))
    return tuple(out)
