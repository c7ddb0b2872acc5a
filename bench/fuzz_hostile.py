"""Well-formed messages with hostile values, as hypothesis strategies: NaN, infinities,
integers past 64 bits, wrong types, unknown names and models, shapes that overflow or
lie about their bytes, huge repeated fields, over-limit inputs, chat messages with odd
roles, huge texts and hostile media parts (bench.fuzz_media), every model's params.

    @given(generate_requests())                     # a test: one GenerateRequest per example
    for_each(hostile_calls(), 100, seed=0, fn=send)  # the benchmark: 100 calls, reproducibly

Values that make a valid request expensive (max_new_tokens, steps, width, ...) are
either invalid or small: a legitimately valid message costs the mesh one prefill or a
small image, and its stream is cancelled at its first event (bench.fuzz_rpcs).
"""
from __future__ import annotations

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench.fuzz_media import S_MEDIA_PART
from bench.fuzz_mesh import MODELS
from bench.fuzz_rpcs import EXPORT, GENERATE, RUN, FuzzCall
from bench.fuzz_values import (HUGE_TEXT, OVER_LIMIT_PERCENT, OVER_LIMIT_TENSOR, S_BYTES, S_ID, S_IDS, S_INPUT_IDS,
                               S_NAME, S_NODE, S_PARAM_KEY, S_PARAMS, S_PERCENT, S_PORT, S_SHORT, S_STRING, S_TENSOR,
                               S_TENSORS, S_U32, S_U64, S_VALUES, fill_struct)

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
S_ROLE = st.sampled_from(("user", "user", "system", "assistant", "", "bogus"))
S_NUM_PARTS, S_NUM_TURNS = st.sampled_from((0, 1, 1, 2, 3)), st.sampled_from((0, 0, 1, 2))


def add_part(content, draw) -> None:
    """A text part (hostile text) or a media part (bench.fuzz_media) appended to `content`."""
    from protos.starmesh.v1 import conductor_pb2 as pb

    if draw(st.booleans()):
        content.add(text=draw(S_STRING))
        return
    kind, data, mime = draw(S_MEDIA_PART)
    getattr(content.add(), kind).CopyFrom(pb.MediaPart(data=data, mime_type=mime))


def add_messages(messages, draw) -> None:
    """0-2 chat messages of any role, each of 0-3 parts, appended to `messages`."""
    for _ in range(draw(S_NUM_TURNS)):
        turn = messages.add(role=draw(S_ROLE))
        for _ in range(draw(S_NUM_PARTS)):
            add_part(turn.content, draw)


@st.composite
def generate_requests(draw):
    from protos.starmesh.v1 import conductor_pb2 as pb

    req = pb.GenerateRequest(model=draw(S_MODEL),
                             request_id=draw(S_STRING), text=draw(S_STRING),
                             input_ids=draw(S_INPUT_IDS))
    add_messages(req.messages, draw)
    req.inputs.extend(draw(S_TENSORS))
    if draw(S_PERCENT) < OVER_LIMIT_PERCENT:
        req.inputs.append(OVER_LIMIT_TENSOR)
    fill_struct(req.params, draw(S_PARAMS))
    req.raw_outputs.extend(draw(S_STRINGS))
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


S_PERTURBATION = st.sampled_from(("param", "param", "param", "ids", "tensor", "input", "part"))


def _perturb(draw, params_msg, tensors, ids=None, messages=None) -> None:
    """One field of a valid message made hostile: a param, the ids, a tensor, or a chat
    message's content part (one replaced, or one more)."""
    what = draw(S_PERTURBATION)
    if what == "part" and messages is not None and len(messages):
        content = messages[-1].content
        if len(content) and draw(st.booleans()):
            del content[draw(st.integers(0, len(content) - 1))]
        add_part(content, draw)
    elif what == "param":
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
    _perturb(draw, req.params, req.inputs, req.input_ids, req.messages)
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
