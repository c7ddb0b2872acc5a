"""A world-model mesh for end-to-end tests: the world service (tiny V-JEPA 2-AC) on
loopback gRPC in this process, and a conductor serving model "vjepa2_ac" on it."""
from __future__ import annotations

from dataclasses import dataclass

import grpc
import torch

from conductor.service import ConductorService
from pipelines.vjepa2_ac.model import served_model
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.background import BackgroundServer
from cluster.registry import build_component
from tests.fixtures import tiny_vjepa2
from tests.fixtures.services import describe, start_in_process
from transport.codec import inline_ref
from tests.e2e.image_mesh import collect

MODEL = "vjepa2_ac"


@dataclass
class WorldMesh:
    component: object
    world: BackgroundServer
    conductor: BackgroundServer

    @classmethod
    def start(cls) -> "WorldMesh":
        component = build_component("world", checkpoint=tiny_vjepa2.checkpoint())
        world = start_in_process(component)
        conductor = BackgroundServer(ConductorService([served_model(MODEL, world.address)]))
        conductor.start()
        return cls(component, world, conductor)

    @property
    def address(self) -> str:
        return self.conductor.address

    def open_requests(self) -> int:
        return describe(self.world.address).num_open_requests

    def conductor_requests(self) -> int:
        return sum(len(ex.requests) for ex in self.conductor.hosted.executors.values())

    def generate(self, req: pb.GenerateRequest, timeout: float = 60) -> dict[str, list[torch.Tensor]]:
        with grpc.insecure_channel(self.address) as channel:
            return collect(conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=timeout))

    def stop(self) -> None:
        self.conductor.stop()
        self.world.stop()


def request(rid: str = "", **tensors_and_params) -> pb.GenerateRequest:
    """Tensors (frames, actions, states, goal) as inputs; anything else as params."""
    req = pb.GenerateRequest(model=MODEL, request_id=rid)
    params = {}
    for name, value in tensors_and_params.items():
        if isinstance(value, torch.Tensor):
            from transport.ref_proto import ref_to_proto

            ref_to_proto(inline_ref(value.contiguous()), req.inputs.add(name=name).tensor)
        else:
            params[name] = value
    req.params.update(params)
    return req
