"""Valid messages for every fuzzed RPC (bytes on the wire), the material the mutators
truncate and flip. Requests are small: a valid one costs the mesh a prefill, two
denoising steps of a 64x64 image, a short rollout or a span, never a long generation.
Every model of bench.fuzz_mesh has one, and every way a prompt comes in: ids, a named
tensor, `text` and chat messages with image and audio parts."""
from __future__ import annotations

from bench.fuzz_rpcs import DESCRIBE, EXPORT, GENERATE, HEALTH, LIST_MODELS, RUN, Rpc

TEXT_IDS = [1, 2, 10, 104, 105, 3, 10, 1, 4, 10]  # a short prompt of the tiny vocabulary
PROMPT = b"a red fox in the snow"
TEXT_PARAMS = {"max_new_tokens": 2}
SPEECH_PARAMS = {"max_new_tokens": 2, "max_frames": 4}
IMAGE_PARAMS = {"steps": 2, "width": 64, "height": 64, "seed": 7, "guidance": 5.0}
ORPHEUS_PARAMS = {"max_new_tokens": 8, "voice": "tara"}
WORLD_PARAMS = {"horizon": 2}
WORLD_FRAMES, WORLD_PIXELS, WORLD_ACTION_DIM = 2, 64, 7  # the tiny world model's crop and action size


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
    return [text, speech, image, *prompt_requests(), world_request()]


def prompt_requests() -> list:
    """Prompts the conductor formats and tokenizes: `text` for the text, image and Orpheus
    models, and one chat message with an image, a clip and text for the speech model."""
    from bench.fuzz_media import png, wav
    from protos.starmesh.v1 import conductor_pb2 as pb

    out = []
    for model, params in (("text", TEXT_PARAMS), ("sd3", IMAGE_PARAMS), ("orpheus", ORPHEUS_PARAMS)):
        req = pb.GenerateRequest(model=model, text=PROMPT.decode())
        req.params.update(params)
        out.append(req)
    seeing = pb.GenerateRequest(model="qwen3-omni")
    turn = seeing.messages.add(role="user")
    turn.content.add(image=pb.MediaPart(data=png(28, 28), mime_type="image/png"))
    turn.content.add(audio=pb.MediaPart(data=wav(0.5), mime_type="audio/wav"))
    turn.content.add(text="What is it?")
    seeing.params.update(SPEECH_PARAMS)
    return out + [seeing]


def world_request():
    """A rollout of the world model: frames [F, 3, 64, 64], actions and states [F + 1, 7]."""
    from protos.starmesh.v1 import conductor_pb2 as pb

    steps = WORLD_FRAMES + WORLD_PARAMS["horizon"] - 1
    req = pb.GenerateRequest(model="vjepa2-ac")
    req.inputs.add(name="frames").tensor.CopyFrom(float_ref([WORLD_FRAMES, 3, WORLD_PIXELS, WORLD_PIXELS]))
    req.inputs.add(name="actions").tensor.CopyFrom(float_ref([steps, WORLD_ACTION_DIM]))
    req.inputs.add(name="states").tensor.CopyFrom(float_ref([steps, WORLD_ACTION_DIM]))
    req.params.update(WORLD_PARAMS)
    return req


def float_ref(shape: list[int]):
    """A float32 TensorRef of small deterministic values."""
    import math
    import struct

    from protos.starmesh.v1 import tensor_pb2

    n = math.prod(shape)
    data = struct.pack(f"<{n}f", *((i % 17) / 17.0 - 0.5 for i in range(n)))
    return tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_FLOAT32, shape=shape, inline_bytes=data)


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
