"""EdgeRoute and chunk policies <-> their starmesh.v1 messages."""
from __future__ import annotations

from graph.chunking import ChunkPolicy, FixedChunk, LeftContext, SlidingWindow
from protos.starmesh.v1 import component_pb2 as pb
from runtime.items import EdgeRoute
from core.errors import InvalidArgument

MAX_WINDOW = 1 << 20  # items a route may hold in flight: far above any edge's bound


def policy_to_proto(policy: ChunkPolicy, out: pb.ChunkPolicySpec) -> None:
    out.pad_final = policy.pad_final
    if isinstance(policy, FixedChunk):
        out.kind, out.size = "fixed", policy.size
    elif isinstance(policy, SlidingWindow):
        out.kind, out.size, out.stride = "sliding", policy.window, policy.stride
    elif isinstance(policy, LeftContext):
        out.kind, out.size, out.left, out.first = "left_context", policy.chunk, policy.left, policy.first
        out.growth = policy.growth
    else:
        raise TypeError(f"no wire form for chunk policy {policy!r}")


def policy_from_proto(m: pb.ChunkPolicySpec, field: str) -> ChunkPolicy:
    try:
        if m.kind == "fixed":
            return FixedChunk(m.size, m.pad_final)
        if m.kind == "sliding":
            return SlidingWindow(m.size, m.stride, m.pad_final)
        if m.kind == "left_context":
            return LeftContext(m.size, m.left, m.pad_final, m.first, m.growth)
    except InvalidArgument as e:  # GraphError: the policy's own validation
        raise InvalidArgument(f"{field}: {e}") from None
    raise InvalidArgument(f"{field}.kind {m.kind!r} is not fixed, sliding or left_context")


def routes_to_proto(routes, out) -> None:
    for r in routes:
        m = out.add()
        m.src_port, m.dst_node, m.dst_port, m.window = r.src_port, r.dst_node, r.dst_port, r.window
        m.dst_iteration.extend(r.dst_iteration)
        m.peer, m.peer_host_id, m.token, m.edge = r.peer, r.peer_host_id, r.token, r.edge
        policy_to_proto(r.policy, m.policy)


def routes_from_proto(msgs, field: str) -> tuple[EdgeRoute, ...]:
    out = []
    for i, m in enumerate(msgs):
        where = f"{field}.routes[{i}]"
        if not (m.src_port and m.dst_node and m.dst_port):
            raise InvalidArgument(f"{where}: src_port, dst_node and dst_port are required")
        if not 1 <= m.window <= MAX_WINDOW:
            raise InvalidArgument(f"{where}.window must be in [1, {MAX_WINDOW}], got {m.window}")
        if m.peer and not m.token:
            raise InvalidArgument(f"{where}.token is required for a route to a peer")
        out.append(EdgeRoute(m.src_port, m.dst_node, m.dst_port, policy_from_proto(m.policy, f"{where}.policy"),
                             tuple(m.dst_iteration[:]), m.window, m.peer, m.peer_host_id, m.token, m.edge))
    return tuple(out)
