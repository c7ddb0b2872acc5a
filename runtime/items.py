"""Work items that travel on `Component.Run`, as the core sees them (no protobuf).

`runtime.item_proto` converts them to and from `starmesh.v1` messages at the gRPC edge.
Inbound: OpenNode, PushChunk, Cancel, Release, Credit, AcceptRoute. Outbound: NodeOutput
(or NodeOutputs: a step's outputs of one node, columnar, as a component returns them),
NodeError, NodeDone, RouteCredit (to a producer's runtime on its peer stream) and Alive
(the heartbeat).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from core.context_use import ContextUse
from core.pace import Pace
from graph.composites import StopRule
from transport.refs import ConsumedLease, TensorRef  # noqa: F401  (ConsumedLease re-exported)

if TYPE_CHECKING:
    from runtime.push_batch import PushBatch  # one engine step's pushes to a peer, columnar

# The node of a padding unit (docs/offload.md, dlo_group): the conductor opens it on each
# rank of a lockstep group that a step has no branch for, so every rank receives as many
# lockstep units; the rank answers NodeDone once a round consumed it (its padding forward).
LOCKSTEP_PAD = "lockstep_pad"


@dataclass(frozen=True)
class ChunkInfo:
    """Where a chunk-fed run sits in its stream."""

    start: int = 0
    num_context: int = 0
    is_last: bool = False
    num_pad: int = 0

    @property
    def first_new(self) -> int:
        """Stream position of the chunk's first new item (where its run's pace starts)."""
        return self.start + self.num_context


@dataclass(frozen=True)
class StreamInput:
    """A loop run inside the component fed by PushChunk items on `port`."""

    port: str
    continue_after_producer_done: bool = False


@dataclass(frozen=True)
class EdgeRoute:
    """A streaming edge that the producer's runtime feeds itself: it cuts `policy`'s
    chunks from the run's `src_port` outputs (in iteration order) and pushes each one to
    the consumer replica `peer` ("" = this process) with `token`. Buffered items plus
    items pushed and not yet credited back stay within `window`: the producing run is
    parked beyond it. The consumer runs `dst_node` at dst_iteration (an open loop run fed
    by pushes) or at dst_iteration + (k,) (one run per chunk)."""

    src_port: str
    dst_node: str
    dst_port: str
    policy: Any  # a graph.chunking.ChunkPolicy
    dst_iteration: tuple[int, ...] = ()
    window: int = 4096
    peer: str = ""
    peer_host_id: str = ""
    token: str = ""
    edge: str = ""  # "src.port -> dst.port"

    def __post_init__(self) -> None:
        if not (self.src_port and self.dst_node and self.dst_port):
            raise ValueError("route: src_port, dst_node and dst_port are required")
        if self.window < 1:
            raise ValueError(f"route.window must be >= 1, got {self.window}")


@dataclass(frozen=True)
class OpenNode:
    """Opens a node run for one request; `inputs` are references until resolved.

    A run of a loop inside its component carries the loop's `stop_rule` as the service
    evaluates it (stop_token_ids, component_predicate; no watch: the run watches its own
    output, and conductor-side predicates stay with the conductor) and `max_iters`, the
    loop's bound (0: none given, the node's own bound)."""

    request_id: str
    node: str
    walk: str = ""
    iteration: tuple[int, ...] = ()
    inputs: dict[str, TensorRef] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    stop_rule: StopRule = StopRule()
    traceparent: str = ""
    tracestate: str = ""
    consumer_host_ids: tuple[str, ...] = ()  # hosts of the services its outputs go to (transport choice)
    credits: dict[str, int] = field(default_factory=dict)  # output port -> items before parking
    chunk: ChunkInfo | None = None
    stream: StreamInput | None = None
    routes: tuple[EdgeRoute, ...] = ()
    quiet_ports: tuple[str, ...] = ()  # outputs only routes consume: not sent back
    max_iters: int = 0
    pace: Pace | None = None  # when its items are due (core.pace); None: no deadline
    contexts: tuple[ContextUse, ...] = ()  # kept KV contexts it reads or leaves (core.context_use)
    # outputs the conductor or its client reads by value (walk outputs, stop rules it
    # evaluates): exported inline, whatever consumer_host_ids says for the others
    client_ports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("open.request_id is empty")
        if not self.node:
            raise ValueError("open.node is empty")


@dataclass(frozen=True)
class PushChunk:
    request_id: str
    node: str
    port: str
    iteration: tuple[int, ...] = ()
    tensors: dict[str, TensorRef] = field(default_factory=dict)
    end_of_stream: bool = False
    num_context: int = 0  # leading items already pushed before (left context)
    num_pad: int = 0
    route: str = ""  # the EdgeRoute token of a push from a producer's runtime
    start: int = 0  # stream position of the chunk's first item (routed pushes)
    produced_us: tuple[float, ...] = ()  # when each new item was produced (routed pushes)
    # When the consumer's runtime read the push off its stream (wall-clock us; 0: handed
    # over in this process). Local, never on the wire, and not part of the push's identity.
    received_us: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class AcceptRoute:
    """From the conductor to an EdgeRoute's consumer: pushes carrying `token` feed
    `run.node` of `run.request_id` at `run.iteration`, into that open loop run (`push`)
    or as one run per chunk built from `run` (walk, params, trace context, own routes)."""

    token: str
    run: "OpenNode"
    port: str
    push: bool = False
    edge: str = ""
    window: int = 4096
    per_item: bool = False  # the edge is traced as one span per request, not per chunk

    def __post_init__(self) -> None:
        if not self.token or not self.port:
            raise ValueError("accept: token and port are required")


@dataclass(frozen=True)
class Cancel:
    request_id: str
    reason: str = ""


@dataclass(frozen=True)
class Repace:
    """The request's playback origin moved: its runs here are due relative to origin_s."""

    request_id: str
    origin_s: float


@dataclass(frozen=True)
class Release:
    """A consumer acknowledges leases of this process's arena."""

    request_id: str
    lease_ids: tuple[int, ...]


@dataclass(frozen=True)
class Credit:
    """Room for `amount` more items from one run's output port (backpressure)."""

    request_id: str
    node: str
    port: str
    amount: int
    iteration: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContextOp:
    """A kept context of `owner`, outside any request: released (keep_tokens 0) or cut back
    to its first keep_tokens tokens (a session's conversation rolled back or closed)."""

    context_id: str
    owner: str
    keep_tokens: int = 0


InboundItem = Union[OpenNode, PushChunk, Cancel, Release, Credit, AcceptRoute, Repace, "PushBatch", ContextOp]


@dataclass(frozen=True)
class NodeOutput:
    """Outputs of one node step; `tensors` hold torch tensors inside the core."""

    request_id: str
    node: str
    tensors: dict[str, Any]
    iteration: tuple[int, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    produced_us: float = 0.0  # set by the runtime as it sends the output (0: unknown)


@dataclass(frozen=True)
class NodeOutputs:
    """One step's outputs of one node for several of its runs, columnar: entry i is the
    run (request_ids[i], node, iterations[i]), and each port's tensor stacks the entries'
    values along dim 0, one row each ([N, ...]: entry i's value is row i, a [1, ...] view).
    The runtime treats it as the N NodeOutputs it stands for, in order; the component
    builds no object or tensor per entry."""

    node: str
    request_ids: tuple[str, ...]
    iterations: tuple[tuple[int, ...], ...]
    tensors: dict[str, Any]  # port -> [N, ...]

    def __post_init__(self) -> None:
        n = len(self.request_ids)
        if len(self.iterations) != n or any(int(t.shape[0]) != n for t in self.tensors.values()):
            raise ValueError(f"NodeOutputs of {self.node}: {n} request ids, {len(self.iterations)} iterations, "
                             f"rows {[int(t.shape[0]) for t in self.tensors.values()]}: one row per entry")


@dataclass(frozen=True)
class NodeError:
    request_id: str
    node: str
    status: str  # name of a grpc.StatusCode, e.g. "INVALID_ARGUMENT"
    message: str
    iteration: tuple[int, ...] = ()


@dataclass(frozen=True)
class NodeDone:
    request_id: str
    node: str
    consumed: tuple[ConsumedLease, ...] = ()
    iteration: tuple[int, ...] = ()  # a node run is identified by (request_id, node, iteration)
    metadata: dict[str, Any] = field(default_factory=dict)  # a routed edge's statistics at its end


@dataclass(frozen=True)
class RouteCredit:
    """To a producer's runtime: `amount` more items fit the route's window, and these
    leases of its arena are no longer referenced by the consumer."""

    request_id: str
    token: str
    amount: int = 0
    lease_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Alive:
    """A replica's heartbeat on one stream: the requests it knows there (open, or queued
    to open). Not about one request: request_id is empty."""

    request_ids: tuple[str, ...]
    request_id: str = ""


OutboundEvent = Union[NodeOutput, NodeOutputs, NodeError, NodeDone, RouteCredit, Alive]
