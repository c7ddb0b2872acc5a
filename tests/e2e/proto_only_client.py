"""A client written from protos/starmesh/v1/conductor.proto alone: it imports only grpc,
protobuf and the stubs grpc_tools generated next to it (no starmesh module). Run as
`python proto_only_client.py ADDRESS` with only the stubs' folder on the path; prints
one JSON object of what it got back.
"""
import json
import struct
import sys

import grpc

from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc


def collect(stub, request):
    out = {"text": "", "token_ids": [], "audio": [], "sample_rates": [], "sequence": [], "images": [], "steps": [],
           "usage": None}
    for ev in stub.Generate(request, timeout=300):
        kind = ev.WhichOneof("kind")
        if kind == "text":
            out["text"] += ev.text.text
            out["token_ids"] += list(ev.text.token_ids)
        elif kind == "audio":
            assert ev.audio.format == pb.AUDIO_FORMAT_PCM_F32LE
            out["audio"] += list(struct.unpack(f"<{ev.audio.num_samples}f", ev.audio.samples))
            out["sample_rates"].append(ev.audio.sample_rate)
            out["sequence"].append(ev.audio.sequence_number)
        elif kind == "image":
            out["images"].append({"png_hex": ev.image.data.hex(), "width": ev.image.width,
                                  "height": ev.image.height, "mime_type": ev.image.mime_type})
        elif kind == "step":
            out["steps"].append([ev.step.step, ev.step.num_steps])
        elif kind == "usage":
            out["usage"] = {"prompt_tokens": ev.usage.prompt_tokens, "completion_tokens": ev.usage.completion_tokens,
                            "audio_seconds": ev.usage.audio_seconds, "rtf": ev.usage.real_time_factor,
                            "ttfa_ms": ev.usage.time_to_first_audio_ms, "latency_ms": ev.usage.latency_ms}
    return out


def main(address: str) -> None:
    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        models = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}
        speech = models["omni"]
        result = {"models": {name: {"params": [p.name for p in m.params], "voices": list(m.voices),
                                    "voice_param": m.voice_param, "accepts_text": m.accepts_text,
                                    "modalities": [pb.Modality.Name(x) for x in m.output_modalities]}
                             for name, m in models.items()}}
        speak = pb.GenerateRequest(model="omni", output_modalities=[pb.MODALITY_TEXT, pb.MODALITY_AUDIO])
        speak.messages.add(role="user").content.add(text="Hello there")
        speak.params.update({"max_new_tokens": 8, "max_frames": 6, "min_frames": 6, speech.voice_param: speech.voices[0]})
        result["speech"] = collect(stub, speak)
        image = pb.GenerateRequest(model="sd3", text="a red fox in the snow", output_modalities=[pb.MODALITY_IMAGE])
        image.params.update({"steps": 2, "width": 64, "height": 64, "seed": 7})
        result["image"] = collect(stub, image)
        bad = pb.GenerateRequest(model="omni", text="hi")
        bad.params.update({speech.voice_param: "nobody"})
        try:
            collect(stub, bad)
        except grpc.RpcError as e:
            result["bad_voice"] = [e.code().name, e.details()]
    result["stubs"] = pb.__file__
    project = ("core", "conductor", "client", "runtime", "transport", "pipelines", "engine", "graph", "cli")
    result["project_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in project)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
