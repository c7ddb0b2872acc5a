"""Valid messages for every fuzzed RPC (bytes on the wire), the material the mutators
truncate and flip. Requests are small: a valid one costs the mesh a prefill, two
denoising steps of a 64x64 image or a span, never a long generation."""
from __future__ import annotations

from bench.fuzz_rpcs import DESCRIBE, EXPORT, GENERATE, HEALTH, LIST_MODELS, RUN, Rpc

TEXT_IDS = [1, 2, 10, 104, 105, 3, 10, 1, 4, 10]  # a short prompt of the tiny vocabulary
PROMPT = b"a red fox in the snow"
TEXT_PARAMS = {"max_new_tokens": 2}
SPEECH_PARAMS = {"max_new_tokens": 2, "max_frames": 4}
IMAGE_PARAMS = {"steps": 2, "width": 64, "height": 64, "seed": 7, "guidance": 5.0}


def generate_requests() -> list:
    """One valid GenerateRequest per model of bench.fuzz_mesh."""
    from protos.starmesh.v1 import conductor_pb2 as pb

    text = pb.GenerateRequest(model="text", input_ids=TEXT_IDS)
    text.params.update(TEXT_PARAMS)
    speech = pb.GenerateRequest(model="qwen3-omni", input_ids=TEXT_IDS)
    speech.params.update(SPEECH_PARAMS)
    image = pb.GenerateRequest(model="sd3")
    image.inputs.add(name="prompt").tensor.CopyFrom(prompt_ref())
    image.params.update(IMAGE_PARAMS)
    return [text, speech, image]


def prompt_ref():
    from protos.starmesh.v1 import tensor_pb2

    return tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_UINT8, shape=[len(PROMPT)], inline_bytes=PROMPT)


def ids_ref(ids: list[int]):
    import struct

    from protos.starmesh.v1 import tensor_pb2

    return tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_INT64, shape=[len(ids)],
                                inline_bytes=struct.pack(f"<{len(ids)}q", *ids))


def run_requests() -> list[list]:
    """Run streams for the thinker: a prefill opened then cancelled, and one message of
    every other item kind (about requests the stream never opened)."""
    from protos.starmesh.v1 import component_pb2 as pb

    open_msg = pb.RunRequest()
    o = open_msg.items.add().open
    o.request_id, o.node, o.walk = "fuzz-seed", "prefill", "generate"
    o.inputs.add(name="input_ids").tensor.CopyFrom(ids_ref(TEXT_IDS))
    o.params.update(TEXT_PARAMS)
    cancel = pb.RunRequest(items=[pb.RunItem(cancel=pb.Cancel(request_id="fuzz-seed", reason="done"))])
    others = pb.RunRequest(sender="fuzz", items=[
        pb.RunItem(release=pb.Release(request_id="fuzz-other", lease_ids=[1])),
        pb.RunItem(credit=pb.Credit(request_id="fuzz-other", node="decode", port="token", amount=1)),
        pb.RunItem(push=pb.PushChunk(request_id="fuzz-other", node="prefill", port="input_ids", route="t")),
    ])
    return [[open_msg, cancel], [others]]


def export_request():
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    span = trace_pb2.Span(trace_id=bytes(range(16)), span_id=bytes(range(8)), name="fuzz",
                          start_time_unix_nano=1, end_time_unix_nano=2)
    span.attributes.add(key="starmesh.request_id").value.string_value = "fuzz-seed"
    req = trace_service_pb2.ExportTraceServiceRequest()
    req.resource_spans.add().scope_spans.add().spans.append(span)
    return req


def seeds() -> dict[Rpc, list[tuple[bytes, ...]]]:
    """RPC -> valid payloads (each a tuple of serialized messages, several for Run)."""
    from grpc_health.v1 import health_pb2

    return {
        GENERATE: [(m.SerializeToString(),) for m in generate_requests()],
        LIST_MODELS: [(b"",)],
        HEALTH: [(health_pb2.HealthCheckRequest(service="").SerializeToString(),)],
        RUN: [tuple(m.SerializeToString() for m in msgs) for msgs in run_requests()],
        DESCRIBE: [(b"",)],
        EXPORT: [(export_request().SerializeToString(),)],
    }
