from google.protobuf import struct_pb2 as _struct_pb2
from protos.starmesh.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StopRule(_message.Message):
    __slots__ = ("max_iters", "stop_token_ids", "predicate")
    MAX_ITERS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_FIELD_NUMBER: _ClassVar[int]
    max_iters: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    predicate: str
    def __init__(self, max_iters: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., predicate: _Optional[str] = ...) -> None: ...

class ChunkInfo(_message.Message):
    __slots__ = ("start", "num_context", "is_last", "num_pad")
    START_FIELD_NUMBER: _ClassVar[int]
    NUM_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    IS_LAST_FIELD_NUMBER: _ClassVar[int]
    NUM_PAD_FIELD_NUMBER: _ClassVar[int]
    start: int
    num_context: int
    is_last: bool
    num_pad: int
    def __init__(self, start: _Optional[int] = ..., num_context: _Optional[int] = ..., is_last: _Optional[bool] = ..., num_pad: _Optional[int] = ...) -> None: ...

class StreamInput(_message.Message):
    __slots__ = ("port", "continue_after_producer_done")
    PORT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_AFTER_PRODUCER_DONE_FIELD_NUMBER: _ClassVar[int]
    port: str
    continue_after_producer_done: bool
    def __init__(self, port: _Optional[str] = ..., continue_after_producer_done: _Optional[bool] = ...) -> None: ...

class ChunkPolicySpec(_message.Message):
    __slots__ = ("kind", "size", "stride", "left", "first", "pad_final", "growth")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    PAD_FINAL_FIELD_NUMBER: _ClassVar[int]
    GROWTH_FIELD_NUMBER: _ClassVar[int]
    kind: str
    size: int
    stride: int
    left: int
    first: int
    pad_final: bool
    growth: float
    def __init__(self, kind: _Optional[str] = ..., size: _Optional[int] = ..., stride: _Optional[int] = ..., left: _Optional[int] = ..., first: _Optional[int] = ..., pad_final: _Optional[bool] = ..., growth: _Optional[float] = ...) -> None: ...

class EdgeRoute(_message.Message):
    __slots__ = ("src_port", "dst_node", "dst_port", "dst_iteration", "policy", "window", "peer", "peer_host_id", "token", "edge")
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_NODE_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_ITERATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    PEER_HOST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EDGE_FIELD_NUMBER: _ClassVar[int]
    src_port: str
    dst_node: str
    dst_port: str
    dst_iteration: _containers.RepeatedScalarFieldContainer[int]
    policy: ChunkPolicySpec
    window: int
    peer: str
    peer_host_id: str
    token: str
    edge: str
    def __init__(self, src_port: _Optional[str] = ..., dst_node: _Optional[str] = ..., dst_port: _Optional[str] = ..., dst_iteration: _Optional[_Iterable[int]] = ..., policy: _Optional[_Union[ChunkPolicySpec, _Mapping]] = ..., window: _Optional[int] = ..., peer: _Optional[str] = ..., peer_host_id: _Optional[str] = ..., token: _Optional[str] = ..., edge: _Optional[str] = ...) -> None: ...

class OpenNode(_message.Message):
    __slots__ = ("request_id", "walk", "node", "iteration", "inputs", "params", "stop_rule", "traceparent", "tracestate", "consumer_host_ids", "credits", "chunk", "stream", "routes", "quiet_ports", "pace", "contexts", "client_ports")
    class CreditsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WALK_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    STOP_RULE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_HOST_IDS_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    QUIET_PORTS_FIELD_NUMBER: _ClassVar[int]
    PACE_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_PORTS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    walk: str
    node: str
    iteration: _containers.RepeatedScalarFieldContainer[int]
    inputs: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.NamedTensor]
    params: _struct_pb2.Struct
    stop_rule: StopRule
    traceparent: str
    tracestate: str
    consumer_host_ids: _containers.RepeatedScalarFieldContainer[str]
    credits: _containers.ScalarMap[str, int]
    chunk: ChunkInfo
    stream: StreamInput
    routes: _containers.RepeatedCompositeFieldContainer[EdgeRoute]
    quiet_ports: _containers.RepeatedScalarFieldContainer[str]
    pace: Pace
    contexts: _containers.RepeatedCompositeFieldContainer[ContextUse]
    client_ports: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., walk: _Optional[str] = ..., node: _Optional[str] = ..., iteration: _Optional[_Iterable[int]] = ..., inputs: _Optional[_Iterable[_Union[_tensor_pb2.NamedTensor, _Mapping]]] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., stop_rule: _Optional[_Union[StopRule, _Mapping]] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ..., consumer_host_ids: _Optional[_Iterable[str]] = ..., credits: _Optional[_Mapping[str, int]] = ..., chunk: _Optional[_Union[ChunkInfo, _Mapping]] = ..., stream: _Optional[_Union[StreamInput, _Mapping]] = ..., routes: _Optional[_Iterable[_Union[EdgeRoute, _Mapping]]] = ..., quiet_ports: _Optional[_Iterable[str]] = ..., pace: _Optional[_Union[Pace, _Mapping]] = ..., contexts: _Optional[_Iterable[_Union[ContextUse, _Mapping]]] = ..., client_ports: _Optional[_Iterable[str]] = ...) -> None: ...

class ContextUse(_message.Message):
    __slots__ = ("read_id", "keep_id", "owner", "slot")
    READ_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    read_id: str
    keep_id: str
    owner: str
    slot: str
    def __init__(self, read_id: _Optional[str] = ..., keep_id: _Optional[str] = ..., owner: _Optional[str] = ..., slot: _Optional[str] = ...) -> None: ...

class ContextOp(_message.Message):
    __slots__ = ("context_id", "owner", "keep_tokens")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    KEEP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    owner: str
    keep_tokens: int
    def __init__(self, context_id: _Optional[str] = ..., owner: _Optional[str] = ..., keep_tokens: _Optional[int] = ...) -> None: ...

class Pace(_message.Message):
    __slots__ = ("origin_unix_s", "item_s", "first_item", "lead_items")
    ORIGIN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ITEM_S_FIELD_NUMBER: _ClassVar[int]
    FIRST_ITEM_FIELD_NUMBER: _ClassVar[int]
    LEAD_ITEMS_FIELD_NUMBER: _ClassVar[int]
    origin_unix_s: float
    item_s: float
    first_item: int
    lead_items: int
    def __init__(self, origin_unix_s: _Optional[float] = ..., item_s: _Optional[float] = ..., first_item: _Optional[int] = ..., lead_items: _Optional[int] = ...) -> None: ...

class Repace(_message.Message):
    __slots__ = ("request_id", "origin_unix_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    origin_unix_s: float
    def __init__(self, request_id: _Optional[str] = ..., origin_unix_s: _Optional[float] = ...) -> None: ...

class PushChunk(_message.Message):
    __slots__ = ("request_id", "node", "iteration", "port", "tensors", "end_of_stream", "num_context", "num_pad", "route", "start", "produced_us")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    END_OF_STREAM_FIELD_NUMBER: _ClassVar[int]
    NUM_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    NUM_PAD_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_US_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    node: str
    iteration: _containers.RepeatedScalarFieldContainer[int]
    port: str
    tensors: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.NamedTensor]
    end_of_stream: bool
    num_context: int
    num_pad: int
    route: str
    start: int
    produced_us: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, request_id: _Optional[str] = ..., node: _Optional[str] = ..., iteration: _Optional[_Iterable[int]] = ..., port: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[_tensor_pb2.NamedTensor, _Mapping]]] = ..., end_of_stream: _Optional[bool] = ..., num_context: _Optional[int] = ..., num_pad: _Optional[int] = ..., route: _Optional[str] = ..., start: _Optional[int] = ..., produced_us: _Optional[_Iterable[float]] = ...) -> None: ...

class PushBatch(_message.Message):
    __slots__ = ("entries", "produced_us", "rows")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_US_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    entries: bytes
    produced_us: bytes
    rows: _tensor_pb2.TensorRef
    def __init__(self, entries: _Optional[bytes] = ..., produced_us: _Optional[bytes] = ..., rows: _Optional[_Union[_tensor_pb2.TensorRef, _Mapping]] = ...) -> None: ...

class AcceptRoute(_message.Message):
    __slots__ = ("token", "run", "port", "push", "edge", "window", "per_item")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    EDGE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    PER_ITEM_FIELD_NUMBER: _ClassVar[int]
    token: str
    run: OpenNode
    port: str
    push: bool
    edge: str
    window: int
    per_item: bool
    def __init__(self, token: _Optional[str] = ..., run: _Optional[_Union[OpenNode, _Mapping]] = ..., port: _Optional[str] = ..., push: _Optional[bool] = ..., edge: _Optional[str] = ..., window: _Optional[int] = ..., per_item: _Optional[bool] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("request_id", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("request_id", "lease_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    lease_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., lease_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("request_id", "node", "iteration", "port", "amount")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    node: str
    iteration: _containers.RepeatedScalarFieldContainer[int]
    port: str
    amount: int
    def __init__(self, request_id: _Optional[str] = ..., node: _Optional[str] = ..., iteration: _Optional[_Iterable[int]] = ..., port: _Optional[str] = ..., amount: _Optional[int] = ...) -> None: ...

class RunItem(_message.Message):
    __slots__ = ("open", "push", "cancel", "release", "credit", "accept", "repace", "batch", "context_op")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    REPACE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_OP_FIELD_NUMBER: _ClassVar[int]
    open: OpenNode
    push: PushChunk
    cancel: Cancel
    release: Release
    credit: Credit
    accept: AcceptRoute
    repace: Repace
    batch: PushBatch
    context_op: ContextOp
    def __init__(self, open: _Optional[_Union[OpenNode, _Mapping]] = ..., push: _Optional[_Union[PushChunk, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ..., accept: _Optional[_Union[AcceptRoute, _Mapping]] = ..., repace: _Optional[_Union[Repace, _Mapping]] = ..., batch: _Optional[_Union[PushBatch, _Mapping]] = ..., context_op: _Optional[_Union[ContextOp, _Mapping]] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("items", "sender")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[RunItem]
    sender: str
    def __init__(self, items: _Optional[_Iterable[_Union[RunItem, _Mapping]]] = ..., sender: _Optional[str] = ...) -> None: ...

class ConsumedLease(_message.Message):
    __slots__ = ("arena", "lease_id")
    ARENA_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    arena: str
    lease_id: int
    def __init__(self, arena: _Optional[str] = ..., lease_id: _Optional[int] = ...) -> None: ...

class NodeOutput(_message.Message):
    __slots__ = ("request_id", "node", "iteration", "outputs", "metadata", "produced_us")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_US_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    node: str
    iteration: _containers.RepeatedScalarFieldContainer[int]
    outputs: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.NamedTensor]
    metadata: _struct_pb2.Struct
    produced_us: float
    def __init__(self, request_id: _Optional[str] = ..., node: _Optional[str] = ..., iteration: _Optional[_Iterable[int]] = ..., outputs: _Optional[_Iterable[_Union[_tensor_pb2.NamedTensor, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., produced_us: _Optional[float] = ...) -> None: ...

class OutputBatch(_message.Message):
    __slots__ = ("node", "request_ids", "depth", "iterations", "produced_us", "columns")
    NODE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_US_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    node: str
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    depth: int
    iterations: bytes
    produced_us: bytes
    columns: _containers.RepeatedCompositeFieldContainer[OutputColumn]
    def __init__(self, node: _Optional[str] = ..., request_ids: _Optional[_Iterable[str]] = ..., depth: _Optional[int] = ..., iterations: _Optional[bytes] = ..., produced_us: _Optional[bytes] = ..., columns: _Optional[_Iterable[_Union[OutputColumn, _Mapping]]] = ...) -> None: ...

class OutputColumn(_message.Message):
    __slots__ = ("port", "rows", "values")
    PORT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    port: str
    rows: bytes
    values: _tensor_pb2.TensorRef
    def __init__(self, port: _Optional[str] = ..., rows: _Optional[bytes] = ..., values: _Optional[_Union[_tensor_pb2.TensorRef, _Mapping]] = ...) -> None: ...

class NodeError(_message.Message):
    __slots__ = ("request_id", "node", "code", "message", "iteration")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    node: str
    code: int
    message: str
    iteration: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., node: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., iteration: _Optional[_Iterable[int]] = ...) -> None: ...

class NodeDone(_message.Message):
    __slots__ = ("request_id", "node", "consumed", "iteration", "metadata")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    node: str
    consumed: _containers.RepeatedCompositeFieldContainer[ConsumedLease]
    iteration: _containers.RepeatedScalarFieldContainer[int]
    metadata: _struct_pb2.Struct
    def __init__(self, request_id: _Optional[str] = ..., node: _Optional[str] = ..., consumed: _Optional[_Iterable[_Union[ConsumedLease, _Mapping]]] = ..., iteration: _Optional[_Iterable[int]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RouteCredit(_message.Message):
    __slots__ = ("token", "amount", "lease_ids", "request_id")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    token: str
    amount: int
    lease_ids: _containers.RepeatedScalarFieldContainer[int]
    request_id: str
    def __init__(self, token: _Optional[str] = ..., amount: _Optional[int] = ..., lease_ids: _Optional[_Iterable[int]] = ..., request_id: _Optional[str] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("output", "error", "done", "credit", "alive", "outputs")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    output: NodeOutput
    error: NodeError
    done: NodeDone
    credit: RouteCredit
    alive: Alive
    outputs: OutputBatch
    def __init__(self, output: _Optional[_Union[NodeOutput, _Mapping]] = ..., error: _Optional[_Union[NodeError, _Mapping]] = ..., done: _Optional[_Union[NodeDone, _Mapping]] = ..., credit: _Optional[_Union[RouteCredit, _Mapping]] = ..., alive: _Optional[_Union[Alive, _Mapping]] = ..., outputs: _Optional[_Union[OutputBatch, _Mapping]] = ...) -> None: ...

class Alive(_message.Message):
    __slots__ = ("request_ids",)
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[RunEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[RunEvent, _Mapping]]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TransportStats(_message.Message):
    __slots__ = ("num_leases", "used_bytes", "arena_bytes")
    NUM_LEASES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ARENA_BYTES_FIELD_NUMBER: _ClassVar[int]
    num_leases: int
    used_bytes: int
    arena_bytes: int
    def __init__(self, num_leases: _Optional[int] = ..., used_bytes: _Optional[int] = ..., arena_bytes: _Optional[int] = ...) -> None: ...

class ComponentInfo(_message.Message):
    __slots__ = ("name", "nodes", "host_id", "arena", "mooncake_session", "version", "transport", "num_open_requests", "load")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    ARENA_FIELD_NUMBER: _ClassVar[int]
    MOONCAKE_SESSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    NUM_OPEN_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    host_id: str
    arena: str
    mooncake_session: str
    version: str
    transport: TransportStats
    num_open_requests: int
    load: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., host_id: _Optional[str] = ..., arena: _Optional[str] = ..., mooncake_session: _Optional[str] = ..., version: _Optional[str] = ..., transport: _Optional[_Union[TransportStats, _Mapping]] = ..., num_open_requests: _Optional[int] = ..., load: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
