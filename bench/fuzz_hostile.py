"""Well-formed messages with hostile values, as hypothesis strategies: NaN, infinities,
integers past 64 bits, wrong types, unknown names and models, shapes that overflow or
lie about their bytes, huge repeated fields, over-limit inputs.

    @given(generate_requests())                     # a test: one GenerateRequest per example
    for_each(hostile_calls(), 100, seed=0, fn=send)  # the benchmark: 100 calls, reproducibly

Values that make a valid request expensive (max_new_tokens, steps, width, ...) are
either invalid or small: a legitimately valid message costs the mesh one prefill or a
small image, and its stream is cancelled at its first event (bench.fuzz_rpcs).
"""
from __future__ import annotations

import math

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench.fuzz_mesh import MODELS
from bench.fuzz_rpcs import EXPORT, GENERATE, RUN, FuzzCall

HUGE_TEXT = "x" * 100_000
BAD_FLOATS = (math.nan, math.inf, -math.inf, 1e30, -1e30, 1e308, -1.0, 2.0 ** 63, 2.0 ** 64)
NAMES = ("prompt", "input_ids", "latent", "prompt_embeds", "x", "", "bogus", "a/../../b", "\x00", "x" * 300)
NODES = ("prefill", "decode", "talker", "code2wav", "clip_l", "t5", "denoise_cond", "init_latent", "bogus", "")
PARAM_KEYS = ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed",
              "suppress_token_ids", "stop_token_ids", "ignore_eos", "max_frames", "min_frames", "speaker",
              "talker_temperature", "first_chunk", "steps", "guidance", "width", "height", "negative_prompt",
              "max_sequence_length", "return_float", "renorm", "bogus", "", "x" * 300)
# Keys whose large valid values cost real work: only invalid or small values are sent.
COSTLY = {"max_new_tokens", "max_frames", "min_frames", "steps", "width", "height", "max_sequence_length",
          "first_chunk"}
SMALL_VALID = {"width": 64, "height": 64, "steps": 1, "max_sequence_length": 8}
DIMS = (0, 1, 2, 3, 8, 64, -1, 1 << 31, 1 << 62, (1 << 63) - 1)
ID_VALUES = (0, 1, 10, 255, 256, 1 << 15, (1 << 31) - 1, 1 << 31, (1 << 63) - 1, -1, -(1 << 63))
DTYPE_VALUES = tuple(range(0, 12)) + (-1, 1 << 20)  # the enum's values and some it does not have
ELEMENT_SIZES = {1: 4, 2: 2, 3: 2, 4: 8, 5: 4, 6: 2, 7: 1, 8: 1, 9: 1}
MAX_INLINE = 64 << 10  # a consistent inline tensor is built only up to this size
OVER_LIMIT_BYTES, OVER_LIMIT_PERCENT = 17 << 20, 3  # how big, and how often, a tensor past the limit is

# Strategies built once (building one per draw costs hypothesis more than the draw).
S_NAME, S_NODE, S_ID = st.sampled_from(NAMES), st.sampled_from(NODES), st.sampled_from(ID_VALUES)
S_DTYPE, S_WIRE_DTYPE, S_DIM = st.sampled_from(DTYPE_VALUES), st.sampled_from((1, 5, 8)), st.sampled_from(DIMS)
S_RANK = st.sampled_from((0, 1, 1, 2, 3, 9, 70))
S_WHERE = st.sampled_from(("inline", "inline", "inline", "shm", "mooncake", "none"))
S_ARENA = st.sampled_from(("", "starmesh-nope", "../../etc/passwd", "/dev/shm/x"))
S_U64 = st.sampled_from((0, 1, 1 << 40, (1 << 64) - 1))
S_SESSION = st.sampled_from(("", "127.0.0.1:1", "nope"))
S_U32 = st.sampled_from((0, 1, 2, 7, (1 << 32) - 1))
S_COUNT = st.sampled_from((0, 1, 1, 2, 3, 20))
S_PERCENT = st.integers(0, 99)
S_STRING = st.one_of(st.text(max_size=12), st.sampled_from(("", HUGE_TEXT, "\n", "a\x00b", "\U0001f4a5" * 50)))
S_SHORT = st.text(max_size=12)
S_PORT = st.sampled_from(("token", "codes", "", "bogus"))
S_PARAM_KEY = st.sampled_from(PARAM_KEYS)
S_PARAM_KEYS = st.lists(S_PARAM_KEY, max_size=5, unique=True)
S_CONSISTENT = st.sampled_from((True, True, False))
S_BYTES = {**{n: st.binary(min_size=n, max_size=n) for n in range(65)}, -1: st.binary(max_size=64)}
S_IDS_SIZE = st.sampled_from(("none",) * 6 + ("small",) * 13 + ("huge",))
S_IDS = st.lists(st.one_of(st.integers(0, 300), S_ID), min_size=1, max_size=24)
S_MODEL = st.sampled_from(MODELS + ("", "nope", HUGE_TEXT))
S_STRINGS = st.lists(S_STRING, max_size=3)
S_WALK, S_PREDICATE = st.sampled_from(("generate", "", "bogus")), st.sampled_from(("", "bogus", "eos"))
S_ITERATION, S_STOP_IDS = st.lists(S_U32, max_size=3), st.lists(S_ID, max_size=3)
S_PORTS = st.lists(st.sampled_from(("token", "x", "")), max_size=2)
S_KINDS = st.lists(st.sampled_from(("open", "open", "push", "cancel", "release", "credit", "accept", "empty")),
                   max_size=4)
S_LEASES = st.lists(S_U64, max_size=3)
S_SENDER, S_NUM_MESSAGES = st.sampled_from(("", "fuzz", HUGE_TEXT)), st.integers(1, 3)
S_NUM_SPANS, S_ATTRIBUTE = st.sampled_from((0, 1, 3, 50)), st.sampled_from(("starmesh.request_id", "", "k"))


def hostile_number():
    return st.one_of(st.sampled_from(BAD_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                     st.integers(-(1 << 70), 1 << 70).map(float))


def hostile_value(key: str = ""):
    scalars = st.one_of(hostile_number(), st.booleans(), st.none(),
                        st.sampled_from(("NaN", "Infinity", "-Infinity", "", "ethan", "4", HUGE_TEXT)))
    if key in COSTLY:
        small = st.just(float(SMALL_VALID.get(key, 2)))
        return st.one_of(small, st.sampled_from((math.nan, math.inf, -1.0, 0.0, 1e30, 2.5, 63.0, 65.0)),
                         st.booleans(), st.just("2"), st.none())
    lists = st.lists(st.one_of(hostile_number(), st.sampled_from(ID_VALUES).map(float), st.text(max_size=3)),
                     max_size=6)
    nested = st.dictionaries(st.text(max_size=4), scalars, max_size=3)
    return st.one_of(scalars, lists, nested)


S_VALUES = {key: hostile_value(key) for key in PARAM_KEYS}


@st.composite
def params(draw) -> dict:
    keys = draw(S_PARAM_KEYS)
    out = {key: draw(S_VALUES[key]) for key in keys}
    for key in COSTLY:  # a cheap bound on every costly key the draw left out
        out.setdefault(key, float(SMALL_VALID.get(key, 2)))
    return out


def fill_struct(msg, values: dict) -> None:
    """Struct.update refuses nothing a Struct can hold; huge ints arrive as doubles."""
    msg.update(values)


@st.composite
def tensor_ref(draw):
    from protos.starmesh.v1 import tensor_pb2

    ref = tensor_pb2.TensorRef()
    ref.dtype = draw(S_DTYPE) if draw(st.booleans()) else draw(S_WIRE_DTYPE)
    rank = draw(S_RANK)
    shape = [draw(S_DIM) for _ in range(rank)]
    ref.shape.extend(shape)
    where = draw(S_WHERE)
    if where == "inline":
        ref.inline_bytes = _inline_bytes(draw, ref.dtype, shape)
    elif where == "shm":
        ref.shm.arena = draw(S_ARENA)
        ref.shm.offset, ref.shm.nbytes = draw(S_U64), _claimed(ref.dtype, shape)
        ref.shm.lease_id = draw(S_U64)
    elif where == "mooncake":
        ref.mooncake.session, ref.mooncake.address = draw(S_SESSION), 1
        ref.mooncake.nbytes = _claimed(ref.dtype, shape)
    return ref


S_TENSOR = tensor_ref()


def _claimed(dtype: int, shape: list[int]) -> int:
    n = ELEMENT_SIZES.get(dtype, 1) * math.prod(shape) if all(d >= 0 for d in shape) else 7
    return n if 0 <= n < 1 << 64 else 7


def _inline_bytes(draw, dtype: int, shape: list[int]) -> bytes:
    nbytes = _claimed(dtype, shape)
    if draw(S_CONSISTENT) and nbytes <= MAX_INLINE:  # consistent with the shape
        return draw(S_BYTES[nbytes]) if nbytes <= 64 else bytes(nbytes)
    return draw(S_BYTES[-1])


def over_limit_tensor():
    """A uint8 prompt past the conductor's 16 MiB per input."""
    from protos.starmesh.v1 import tensor_pb2

    nbytes = OVER_LIMIT_BYTES
    ref = tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_UINT8, shape=[nbytes], inline_bytes=bytes(nbytes))
    return tensor_pb2.NamedTensor(name="prompt", tensor=ref)


OVER_LIMIT_TENSOR = over_limit_tensor()


@st.composite
def named_tensors(draw) -> list:
    from protos.starmesh.v1 import tensor_pb2

    n = draw(S_COUNT)
    return [tensor_pb2.NamedTensor(name=draw(S_NAME), tensor=draw(S_TENSOR)) for _ in range(n)]


S_PARAMS = params()


@st.composite
def input_ids(draw) -> list[int]:
    size = draw(S_IDS_SIZE)
    if size == "none":
        return []
    if size == "huge":  # past max_input_ids
        return [7] * ((1 << 18) + 1)
    return draw(S_IDS)


S_TENSORS, S_INPUT_IDS = named_tensors(), input_ids()


@st.composite
def generate_requests(draw):
    from protos.starmesh.v1 import conductor_pb2 as pb

    req = pb.GenerateRequest(model=draw(S_MODEL),
                             request_id=draw(S_STRING), text=draw(S_STRING),
                             input_ids=draw(S_INPUT_IDS))
    req.inputs.extend(draw(S_TENSORS))
    if draw(S_PERCENT) < OVER_LIMIT_PERCENT:
        req.inputs.append(OVER_LIMIT_TENSOR)
    fill_struct(req.params, draw(S_PARAMS))
    req.outputs.extend(draw(S_STRINGS))
    return req


@st.composite
def open_node(draw):
    from protos.starmesh.v1 import component_pb2 as pb

    o = pb.OpenNode(request_id=draw(S_STRING), node=draw(S_NODE),
                    walk=draw(S_WALK),
                    iteration=draw(S_ITERATION), traceparent=draw(S_STRING))
    o.inputs.extend(draw(S_TENSORS))
    fill_struct(o.params, draw(S_PARAMS))
    o.stop_rule.max_iters = draw(S_U32)
    o.stop_rule.stop_token_ids.extend(draw(S_STOP_IDS))
    o.stop_rule.predicate = draw(S_PREDICATE)
    for port in draw(S_PORTS):
        o.credits[port] = draw(S_U32)
    if draw(st.booleans()):
        o.chunk.start, o.chunk.num_context, o.chunk.num_pad = draw(S_U32), draw(S_U32), draw(S_U32)
    if draw(st.booleans()):
        o.stream.port = draw(S_PORT)
    return o


S_OPEN = open_node()


@st.composite
def run_items(draw) -> list:
    from protos.starmesh.v1 import component_pb2 as pb

    out = []
    for kind in draw(S_KINDS):
        rid = draw(S_STRING)
        if kind == "open":
            out.append(pb.RunItem(open=draw(S_OPEN)))
        elif kind == "push":
            out.append(pb.RunItem(push=pb.PushChunk(request_id=rid, node=draw(S_NODE),
                                                    port=draw(S_PORT),
                                                    tensors=draw(S_TENSORS), route=draw(S_STRING),
                                                    num_context=draw(S_U32), start=draw(S_U32))))
        elif kind == "cancel":
            out.append(pb.RunItem(cancel=pb.Cancel(request_id=rid, reason=draw(S_STRING))))
        elif kind == "release":
            ids = draw(S_LEASES)
            out.append(pb.RunItem(release=pb.Release(request_id=rid, lease_ids=ids)))
        elif kind == "credit":
            out.append(pb.RunItem(credit=pb.Credit(request_id=rid, node=draw(S_NODE),
                                                   port="token", amount=draw(S_U32))))
        elif kind == "accept":
            out.append(pb.RunItem(accept=pb.AcceptRoute(token=draw(S_STRING), run=draw(S_OPEN),
                                                        port="token", window=draw(S_U32))))
        else:
            out.append(pb.RunItem())
    return out


S_ITEMS = run_items()


@st.composite
def run_streams(draw) -> list:
    """One Run stream: 1-3 RunRequests."""
    from protos.starmesh.v1 import component_pb2 as pb

    return [pb.RunRequest(items=draw(S_ITEMS), sender=draw(S_SENDER))
            for _ in range(draw(S_NUM_MESSAGES))]


@st.composite
def export_requests(draw):
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    req = trace_service_pb2.ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    for _ in range(draw(S_NUM_SPANS)):
        span = trace_pb2.Span(trace_id=draw(S_BYTES[-1]), span_id=draw(S_BYTES[-1]), name=draw(S_SHORT),
                              start_time_unix_nano=draw(S_U64) >> 1)
        span.attributes.add(key=draw(S_ATTRIBUTE)).value.string_value = draw(S_STRING)
        spans.append(span)
    return req


S_PERTURBATION = st.sampled_from(("param", "param", "param", "ids", "tensor", "input"))


def _perturb(draw, params_msg, tensors, ids=None) -> None:
    """One field of a valid message made hostile: a param, the ids, or a tensor."""
    what = draw(S_PERTURBATION)
    if what == "param":
        key = draw(S_PARAM_KEY)
        fill_struct(params_msg, {key: draw(S_VALUES[key])})
    elif what == "ids" and ids is not None:
        del ids[:]
        ids.extend(draw(S_IDS))
    elif what == "input" and len(tensors):
        tensors[draw(st.integers(0, len(tensors) - 1))].tensor.CopyFrom(draw(S_TENSOR))
    else:
        tensors.add(name=draw(S_NAME)).tensor.CopyFrom(draw(S_TENSOR))


@st.composite
def near_valid_generate(draw):
    """A valid GenerateRequest of a served model (bench.fuzz_seeds) with one field hostile:
    what reaches the services' own checks."""
    from bench.fuzz_seeds import generate_requests as valid

    req = draw(st.sampled_from(valid()))
    _perturb(draw, req.params, req.inputs, req.input_ids)
    return req


@st.composite
def near_valid_run(draw):
    """The seed's thinker prefill with one field hostile, then its cancel."""
    from bench.fuzz_seeds import run_requests

    open_msg, cancel = run_requests()[0]
    o = open_msg.items[0].open
    if draw(st.booleans()):
        o.node = draw(S_NODE)
    _perturb(draw, o.params, o.inputs)
    return [open_msg, cancel]


def _serialized(rpc, origin: str):
    return lambda msgs: FuzzCall(rpc, tuple(m.SerializeToString() for m in msgs), origin)


def hostile_calls():
    """One FuzzCall per example, over Generate, Run and Export."""
    return st.one_of(generate_requests().map(lambda m: [m]).map(_serialized(GENERATE, "hostile")),
                     near_valid_generate().map(lambda m: [m]).map(_serialized(GENERATE, "near_valid")),
                     run_streams().map(_serialized(RUN, "hostile")),
                     near_valid_run().map(_serialized(RUN, "near_valid")),
                     export_requests().map(lambda m: [m]).map(_serialized(EXPORT, "hostile")))


def for_each(strategy, n: int, seed: int, fn) -> None:
    """Calls fn on n examples of `strategy` outside a test (the benchmark), the same
    examples for the same seed; each is dropped once fn returns (some hold megabytes)."""

    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis.seed(seed)
    @given(strategy)
    def each(example):
        fn(example)

    each()
