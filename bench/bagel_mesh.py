"""The BAGEL benchmark's mesh: `starmesh serve bagel` (backbone + ViT + VAE, one process)
and a second `starmesh serve bagel_backbone` replica on loopback, each at --threads torch
threads, and a conductor in this process serving two placements of the same graph:

    "bagel"         every node on the first process (the denoising loop runs inside it)
    "bagel_fanout"  the same, the loop fanned out to the velocity nodes and combine (the
                    conductor drives it; its branches batched in one forward)
    "bagel_cfgp"    the cfg branches and their prefills on the second replica (CFG-parallel)

A request's timings come from its events as they arrive: the latency, the first step
event (the first denoising update) and the step events' spacing.
"""
from __future__ import annotations

import io
import time
from dataclasses import dataclass, field

from bench.service_mesh import ServiceMesh

ONE, FANOUT, CFGP = "bagel", "bagel_fanout", "bagel_cfgp"


@dataclass
class Timed:
    latency_ms: float
    first_step_ms: float | None = None   # request start -> its first step event
    step_ms: float | None = None         # median spacing of its step events
    text_tokens: int = 0
    context_id: str = ""
    steps: list[float] = field(default_factory=list)


def png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def request(model: str, prompt: str, images=(), text: bool = False, **params):
    """A GenerateRequest: `prompt` (UTF-8) after `images` (PIL); text: the answer wanted."""
    import torch

    from protos.starmesh.v1 import conductor_pb2 as pb
    from services.encoder.media_list import pack_media
    from transport.codec import inline_ref
    from transport.ref_proto import ref_to_proto

    req = pb.GenerateRequest(model=model)
    req.output_modalities.append(pb.MODALITY_TEXT if text else pb.MODALITY_IMAGE)
    data = torch.frombuffer(bytearray(prompt.encode()), dtype=torch.uint8)  # [n] UTF-8
    ref_to_proto(inline_ref(data), req.inputs.add(name="prompt").tensor)
    if images:
        for name, tensor in pack_media([("image", png(im)) for im in images]).items():
            ref_to_proto(inline_ref(tensor), req.inputs.add(name=name).tensor)
    req.params.update(params)
    return req


class BagelBenchMesh(ServiceMesh):
    def __init__(self, checkpoint: str, threads: int) -> None:
        from runtime.process import ServiceProcess

        common = ["--checkpoint", checkpoint, "--torch-threads", str(threads), "--log-level", "WARNING"]
        super().__init__([ServiceProcess("bagel", common, name="bagel", start_timeout_s=240),
                          ServiceProcess("bagel_backbone", common, name="bagel_cfg", start_timeout_s=240)],
                         self._models)

    @staticmethod
    def _models(addresses: list[str]) -> list:
        from pipelines.bagel.model import served_model

        main, cfg = addresses
        return [served_model(ONE, main, main, main), served_model(FANOUT, main, main, main, fused=False),
                served_model(CFGP, main, main, main, cfg)]

    def counters(self) -> dict[str, int]:
        """The first backbone's load report (rows_written, rows_queried, kv blocks, ...)."""
        from protos.starmesh.v1 import component_pb2, component_pb2_grpc
        from runtime.tls import sync_channel

        with sync_channel(self.procs[0].address, None) as channel:
            info = component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest(), timeout=10)
        return {k: int(float(v)) for k, v in dict(info.load).items()}


async def run(stub, req) -> Timed:
    """Sends `req`, reads its events to the end: its timings (AssertionError when it made
    neither an image nor text)."""
    t0, steps, out, made = time.perf_counter(), [], Timed(0.0), False
    async for ev in stub.Generate(req, timeout=900):
        kind = ev.WhichOneof("kind")
        if kind == "step":
            steps.append(time.perf_counter())
        elif kind == "image":
            made = True
        elif kind == "text":
            made = True
            out.text_tokens += len(ev.text.token_ids)
        elif kind == "usage":
            out.context_id = ev.usage.context_id
            out.text_tokens = ev.usage.completion_tokens or out.text_tokens
    out.latency_ms = (time.perf_counter() - t0) * 1e3
    assert made, f"{req.model}: no image or text"
    if steps:
        import statistics

        out.first_step_ms = (steps[0] - t0) * 1e3
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        out.step_ms = statistics.median(gaps) * 1e3 if gaps else None
    out.steps = steps
    return out
