"""An SD3 mesh for end-to-end image tests: two service processes on loopback and a
conductor in this process serving two placements of the same graph.

    main   `starmesh serve sd3`: text encoders + DiT + VAE co-located (one replica)
    dit_b  `starmesh serve dit`: a second DiT replica

    model "sd3"       every node on main: both CFG branches run as one batch of 2
    model "sd3_cfgp"  denoise_uncond on dit_b: CFG-parallel across two replicas
    model "sd3_fused" the loop inside main's DiT (denoise_loop, no round trip per step)
"""
from __future__ import annotations

from dataclasses import dataclass

import grpc
import torch

from conductor.service import ConductorService
from pipelines.sd3.model import served_model
from protos.starmesh.v1 import conductor_pb2 as pb
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from tests.fixtures import registry, tiny_sd3
from tests.fixtures.services import describe, start_side_by_side
from transport.codec import inline_ref, view
from transport.ref_proto import ref_from_proto, ref_to_proto


@dataclass
class ImageMesh:
    conductor: BackgroundServer
    procs: dict[str, ServiceProcess]

    @classmethod
    def start(cls) -> "ImageMesh":
        ckpt = tiny_sd3.checkpoint()
        procs = {"main": ServiceProcess("sd3", ["--checkpoint", ckpt], name="sd3-main", start_timeout_s=120),
                 "dit_b": ServiceProcess("dit", ["--checkpoint", ckpt], name="sd3-dit-b", start_timeout_s=120)}
        try:
            start_side_by_side(list(procs.values()))
        except BaseException:
            for proc in procs.values():
                proc.stop()
            raise
        for proc in procs.values():
            registry.register(proc.address, describe(proc.address).arena)
        main, dit_b = procs["main"].address, procs["dit_b"].address
        models = [served_model("sd3", main, main, main), served_model("sd3_cfgp", main, main, main, dit_uncond=dit_b),
                  served_model("sd3_fused", main, main, main, fused=True)]
        conductor = BackgroundServer(ConductorService(models))
        conductor.start()
        return cls(conductor, procs)

    @property
    def address(self) -> str:
        return self.conductor.address

    def open_requests(self) -> dict[str, int]:
        return {name: describe(p.address).num_open_requests for name, p in self.procs.items()}

    def conductor_requests(self) -> int:
        return sum(len(ex.requests) for ex in self.conductor.hosted.executors.values())

    def stop(self) -> None:
        self.conductor.stop()
        for proc in self.procs.values():
            registry.unregister(proc.address)
            proc.stop()


def request(model: str = "sd3", rid: str = "", prompt: str = tiny_sd3.PROMPT, **params) -> pb.GenerateRequest:
    """The image and the steps come back as raw tensors (the fidelity checks compare pixels)."""
    req = pb.GenerateRequest(model=model, request_id=rid, raw_outputs=["image", "step"])
    ref_to_proto(inline_ref(tiny_sd3.prompt_tensor(prompt)), req.inputs.add(name="prompt").tensor)
    req.params.update({**tiny_sd3.BASE, **params})
    return req


def collect(events) -> dict[str, list[torch.Tensor]]:
    """Tensor events by output name, in arrival order."""
    out: dict[str, list[torch.Tensor]] = {}
    for ev in events:
        if ev.WhichOneof("kind") == "tensor":
            ref = ref_from_proto(ev.tensor.tensor, ev.tensor.name)
            assert ref.kind == "inline", f"{ev.tensor.name} arrived by {ref.kind}"
            out.setdefault(ev.tensor.name, []).append(view(ref.location.data, ref.dtype, ref.shape).clone())
    return out


def rpc_error(call) -> grpc.RpcError:
    try:
        list(call)
    except grpc.RpcError as e:
        return e
    raise AssertionError("the request did not fail")
