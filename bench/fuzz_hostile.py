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
MAX_INLINE = 1 << 20  # a consistent inline tensor is built only up to this size


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


@st.composite
def params(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(PARAM_KEYS), max_size=5, unique=True))
    out = {key: draw(hostile_value(key)) for key in keys}
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
    ref.dtype = draw(st.sampled_from(DTYPE_VALUES)) if draw(st.booleans()) else draw(st.sampled_from((1, 5, 8)))
    rank = draw(st.sampled_from((0, 1, 1, 2, 3, 9, 70)))
    shape = [draw(st.sampled_from(DIMS)) for _ in range(rank)]
    ref.shape.extend(shape)
    where = draw(st.sampled_from(("inline", "inline", "inline", "shm", "mooncake", "none")))
    if where == "inline":
        ref.inline_bytes = _inline_bytes(draw, ref.dtype, shape)
    elif where == "shm":
        ref.shm.arena = draw(st.sampled_from(("", "starmesh-nope", "../../etc/passwd", "/dev/shm/x")))
        ref.shm.offset, ref.shm.nbytes = draw(st.sampled_from((0, 1 << 40, (1 << 64) - 1))), _claimed(ref.dtype, shape)
        ref.shm.lease_id = draw(st.sampled_from((0, 1, (1 << 64) - 1)))
    elif where == "mooncake":
        ref.mooncake.session, ref.mooncake.address = draw(st.sampled_from(("", "127.0.0.1:1", "nope"))), 1
        ref.mooncake.nbytes = _claimed(ref.dtype, shape)
    return ref


def _claimed(dtype: int, shape: list[int]) -> int:
    n = ELEMENT_SIZES.get(dtype, 1) * math.prod(shape) if all(d >= 0 for d in shape) else 7
    return n if 0 <= n < 1 << 64 else 7


def _inline_bytes(draw, dtype: int, shape: list[int]) -> bytes:
    choice = draw(st.sampled_from(("consistent", "consistent", "short", "over_limit")))
    nbytes = _claimed(dtype, shape)
    if choice == "consistent" and nbytes <= MAX_INLINE:
        return bytes(nbytes) if draw(st.booleans()) else draw(st.binary(min_size=nbytes, max_size=nbytes)) \
            if nbytes <= 256 else bytes(nbytes)
    if choice == "over_limit":
        return bytes(17 << 20)  # past the conductor's 16 MiB per input
    return draw(st.binary(max_size=64))


@st.composite
def named_tensors(draw, max_size: int = 3) -> list:
    from protos.starmesh.v1 import tensor_pb2

    n = draw(st.sampled_from((0, 1, 1, 2, max_size, 20)))
    return [tensor_pb2.NamedTensor(name=draw(st.sampled_from(NAMES)), tensor=draw(tensor_ref())) for _ in range(n)]


def hostile_string():
    return st.one_of(st.text(max_size=12), st.sampled_from(("", HUGE_TEXT, "\n", "a\x00b", "💥" * 50)))


@st.composite
def input_ids(draw) -> list[int]:
    size = draw(st.sampled_from(("none", "small", "small", "huge")))
    if size == "none":
        return []
    if size == "huge":  # past max_input_ids
        return [7] * ((1 << 18) + 1)
    return draw(st.lists(st.one_of(st.integers(0, 300), st.sampled_from(ID_VALUES)), min_size=1, max_size=24))


@st.composite
def generate_requests(draw):
    from protos.starmesh.v1 import conductor_pb2 as pb

    req = pb.GenerateRequest(model=draw(st.one_of(st.sampled_from(MODELS), st.sampled_from(("", "nope", HUGE_TEXT)))),
                             request_id=draw(hostile_string()), text=draw(hostile_string()),
                             input_ids=draw(input_ids()))
    req.inputs.extend(draw(named_tensors()))
    fill_struct(req.params, draw(params()))
    req.outputs.extend(draw(st.lists(hostile_string(), max_size=3)))
    return req


def _u32():
    return st.sampled_from((0, 1, 2, 7, (1 << 32) - 1))


@st.composite
def open_node(draw):
    from protos.starmesh.v1 import component_pb2 as pb

    o = pb.OpenNode(request_id=draw(hostile_string()), node=draw(st.sampled_from(NODES)),
                    walk=draw(st.sampled_from(("generate", "", "bogus"))),
                    iteration=draw(st.lists(_u32(), max_size=3)), traceparent=draw(hostile_string()))
    o.inputs.extend(draw(named_tensors()))
    fill_struct(o.params, draw(params()))
    o.stop_rule.max_iters = draw(_u32())
    o.stop_rule.stop_token_ids.extend(draw(st.lists(st.sampled_from(ID_VALUES), max_size=3)))
    o.stop_rule.predicate = draw(st.sampled_from(("", "bogus", "eos")))
    for port in draw(st.lists(st.sampled_from(("token", "x", "")), max_size=2)):
        o.credits[port] = draw(_u32())
    if draw(st.booleans()):
        o.chunk.start, o.chunk.num_context, o.chunk.num_pad = draw(_u32()), draw(_u32()), draw(_u32())
    if draw(st.booleans()):
        o.stream.port = draw(st.sampled_from(("token", "codes", "", "bogus")))
    return o


@st.composite
def run_items(draw) -> list:
    from protos.starmesh.v1 import component_pb2 as pb

    out = []
    for kind in draw(st.lists(st.sampled_from(("open", "open", "push", "cancel", "release", "credit", "accept",
                                                "empty")), max_size=4)):
        rid = draw(hostile_string())
        if kind == "open":
            out.append(pb.RunItem(open=draw(open_node())))
        elif kind == "push":
            out.append(pb.RunItem(push=pb.PushChunk(request_id=rid, node=draw(st.sampled_from(NODES)),
                                                    port=draw(st.sampled_from(("token", "codes", ""))),
                                                    tensors=draw(named_tensors()), route=draw(hostile_string()),
                                                    num_context=draw(_u32()), start=draw(_u32()))))
        elif kind == "cancel":
            out.append(pb.RunItem(cancel=pb.Cancel(request_id=rid, reason=draw(hostile_string()))))
        elif kind == "release":
            ids = draw(st.lists(st.sampled_from((0, 1, (1 << 64) - 1)), max_size=3))
            out.append(pb.RunItem(release=pb.Release(request_id=rid, lease_ids=ids)))
        elif kind == "credit":
            out.append(pb.RunItem(credit=pb.Credit(request_id=rid, node=draw(st.sampled_from(NODES)),
                                                   port="token", amount=draw(_u32()))))
        elif kind == "accept":
            out.append(pb.RunItem(accept=pb.AcceptRoute(token=draw(hostile_string()), run=draw(open_node()),
                                                        port="token", window=draw(_u32()))))
        else:
            out.append(pb.RunItem())
    return out


@st.composite
def run_streams(draw) -> list:
    """One Run stream: 1-3 RunRequests."""
    from protos.starmesh.v1 import component_pb2 as pb

    return [pb.RunRequest(items=draw(run_items()), sender=draw(st.sampled_from(("", "fuzz", HUGE_TEXT))))
            for _ in range(draw(st.integers(1, 3)))]


@st.composite
def export_requests(draw):
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    req = trace_service_pb2.ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    for _ in range(draw(st.sampled_from((0, 1, 3, 200)))):
        span = trace_pb2.Span(trace_id=draw(st.binary(max_size=20)), span_id=draw(st.binary(max_size=10)),
                              name=draw(hostile_string()), start_time_unix_nano=draw(st.sampled_from((0, 1 << 63))))
        span.attributes.add(key=draw(st.sampled_from(("starmesh.request_id", "", "k")))).value.string_value = \
            draw(hostile_string())
        spans.append(span)
    return req


def hostile_calls():
    """One FuzzCall per example, over Generate, Run and Export."""
    generate = generate_requests().map(lambda m: FuzzCall(GENERATE, (m.SerializeToString(),), "hostile"))
    run = run_streams().map(lambda ms: FuzzCall(RUN, tuple(m.SerializeToString() for m in ms), "hostile"))
    export = export_requests().map(lambda m: FuzzCall(EXPORT, (m.SerializeToString(),), "hostile"))
    return st.one_of(generate, generate, run, run, export)


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
