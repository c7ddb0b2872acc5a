"""AllGather DLO across the two CFG-parallel dit replicas of a dlo_group (tests/e2e/dlo_mesh.py):
real processes, real gRPC, real gloo. Images are bitwise those of a resident single
replica, alone or with concurrent requests; a request with no branch for rank 1 steps it
with padding; each rank streams its blocks by AllGather, and the ranks' forwards pair up
(equal counts); a cancelled request leaves both ranks serving."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch

from conductor.executor_setup import inprocess_executor
from pipelines.sd3.model import text_to_image_graph
from protos.starmesh.v1 import conductor_pb2_grpc
from cluster.registry import build_component
from services.sd3.text import TextEncoderComponent
from tests.e2e.dlo_mesh import DloMesh
from tests.e2e.image_mesh import collect, request
from tests.fixtures import tiny_sd3
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(240)
# (model, steps, width, height, seed): both placements, different lengths and shapes
WORKLOAD = [("sd3_dlo", 3, 64, 64, 1), ("sd3_dlo", 2, 32, 64, 2), ("sd3_rank0", 3, 64, 32, 3),
            ("sd3_dlo", 4, 64, 64, 4), ("sd3_rank0", 2, 64, 64, 5)]


@pytest.fixture(scope="module")
def mesh():
    with tiny_sd3.one_thread():  # the in-process text encoder and VAE compute as the reference does
        m = DloMesh.start()
        try:
            yield m
        finally:
            m.stop()


@pytest.fixture(scope="module")
def resident():
    """image_float of a resident single replica (every engine at batch 1), per (steps, w, h, seed)."""
    ckpt = tiny_sd3.checkpoint()
    with tiny_sd3.one_thread():
        comps = [TextEncoderComponent.from_checkpoint(ckpt, max_batch_size=1),
                 build_component("dit", checkpoint=ckpt, max_batch_size=1),
                 build_component("vae", checkpoint=ckpt, max_batch_size=1)]

    async def one(ex, steps, w, h, seed):
        params = {**tiny_sd3.BASE, "steps": steps, "width": w, "height": h, "seed": seed}
        out = {}
        async for name, value in ex.generate(f"ref-{steps}-{w}-{h}-{seed}", {"prompt": (tiny_sd3.prompt_tensor(),)},
                                             params):
            out.setdefault(name, []).append(value)
        return out["image_float"][0]

    async def main(specs):
        async with inprocess_executor(text_to_image_graph(), comps) as ex:
            return {spec: await one(ex, *spec) for spec in specs}  # one at a time: batches of one

    specs = {(3, 64, 64, 7)} | {tuple(w[1:]) for w in WORKLOAD}
    try:
        with tiny_sd3.one_thread():
            return asyncio.run(main(sorted(specs)))
    finally:
        for c in comps:
            c.close()


def generate(mesh: DloMesh, model: str, rid: str, **params) -> dict:
    with grpc.insecure_channel(mesh.address) as channel:
        return collect(conductor_pb2_grpc.ConductorStub(channel).Generate(request(model, rid=rid, **params),
                                                                           timeout=60))


def total_forwards(load: dict) -> int:
    return int(load["lockstep_forwards"] + load["lockstep_padding_forwards"])


def test_each_rank_keeps_half_of_every_block_and_gathers_it(mesh):
    for rank in range(2):
        load = mesh.load(rank)
        assert load["dlo_rank"] == rank and load["dlo_world"] == 2 and load["dlo_allgather"] == 1, load
        assert any("transfer allgather" in line for line in mesh.logs[rank]), mesh.logs[rank]


@pytest.mark.parametrize("model", ["sd3_dlo", "sd3_rank0"])
def test_images_are_bitwise_those_of_a_resident_single_replica(mesh, resident, model):
    before = [mesh.load(r) for r in range(2)]
    out = generate(mesh, model, f"solo-{model}")
    assert torch.equal(out["image_float"][0], resident[(3, 64, 64, 7)])
    assert [s.tolist() for s in out["step"]] == [[1, 3], [2, 3], [3, 3]]
    after = [mesh.load(r) for r in range(2)]
    pads = after[1]["lockstep_padding_units"] - before[1]["lockstep_padding_units"]
    assert pads == (6 if model == "sd3_rank0" else 0)  # both branches of 3 steps on rank 0: rank 1 pads each
    assert wait_until(lambda: total_forwards(mesh.load(0)) == total_forwards(mesh.load(1)), 5.0)


def test_concurrent_requests_on_both_placements_are_bitwise_and_pair_up(mesh, resident):
    before = mesh.load(1)

    async def main():
        async with grpc.aio.insecure_channel(mesh.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(i, model, steps, w, h, seed):
                req = request(model, rid=f"c{i}", steps=steps, width=w, height=h, seed=seed)
                return collect([ev async for ev in stub.Generate(req, timeout=60)])

            return await asyncio.gather(*(one(i, *spec) for i, spec in enumerate(WORKLOAD)))

    for (model, steps, w, h, seed), out in zip(WORKLOAD, asyncio.run(main())):
        assert torch.equal(out["image_float"][0], resident[(steps, w, h, seed)]), (model, steps, w, h)
        assert [s.tolist() for s in out["step"]] == [[k, steps] for k in range(1, steps + 1)]
    after = mesh.load(1)
    assert after["lockstep_padding_units"] - before["lockstep_padding_units"] == 2 * (3 + 2)  # the sd3_rank0 steps
    assert after["lockstep_padding_forwards"] > before["lockstep_padding_forwards"]
    assert wait_until(lambda: total_forwards(mesh.load(0)) == total_forwards(mesh.load(1)), 5.0)
    assert all(mesh.load(r)["lockstep_queued_units"] == 0 and mesh.load(r)["lockstep_broken"] == 0 for r in range(2))


@pytest.mark.parametrize("model", ["sd3_dlo", "sd3_rank0"])
def test_a_cancelled_request_leaves_both_ranks_in_step(mesh, resident, model):
    with grpc.insecure_channel(mesh.address) as channel:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(request(model, rid=f"cancel-{model}", steps=500))
        next(call), next(call)  # two step events: the loop is running on both ranks
        call.cancel()
    assert wait_until(lambda: mesh.open_requests() == [0, 0], 10.0), mesh.open_requests()
    assert wait_until(lambda: all(mesh.load(r)["lockstep_queued_units"] == 0 for r in range(2)), 10.0)
    assert wait_until(lambda: total_forwards(mesh.load(0)) == total_forwards(mesh.load(1)), 5.0)
    out = generate(mesh, model, f"after-{model}")  # no rank is left waiting in a collective
    assert torch.equal(out["image_float"][0], resident[(3, 64, 64, 7)])
