"""Text to image through real services on loopback (tests/e2e/image_mesh.py): the mesh
equals diffusers' StableDiffusion3Pipeline, CFG-parallel equals one replica, concurrent
requests of different steps and sizes each get their solo result, cancellation frees
every piece of state, bad input is INVALID_ARGUMENT naming the field, `starmesh
imagine` writes the image."""
import asyncio
import json
import math
import os
import subprocess
import sys

import grpc
import pytest
import torch

from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from tests.e2e.image_mesh import ImageMesh, collect, request, rpc_error
from tests.fixtures import tiny_sd3
from tests.fixtures.services import REPO, wait_until

pytestmark = pytest.mark.timeout(180)
# steps, width x height, seed: every request differs in length or shape (or both)
WORKLOAD = [(1, 64, 64, 1), (2, 32, 64, 2), (3, 64, 32, 3), (4, 48, 48, 4), (5, 64, 64, 5), (6, 32, 32, 6)]


@pytest.fixture(scope="module")
def mesh():
    m = ImageMesh.start()
    yield m
    m.stop()


def generate(mesh: ImageMesh, req: pb.GenerateRequest) -> dict:
    with grpc.insecure_channel(mesh.address) as channel:
        return collect(conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=60))


@pytest.mark.parametrize("model", ["sd3", "sd3_fused"])
def test_mesh_equals_diffusers_pipeline(mesh, model):
    out = generate(mesh, request(model, rid=f"fidelity-{model}"))
    ref = tiny_sd3.reference_image()
    assert torch.allclose(out["image_float"][0], ref, atol=1e-4), (out["image_float"][0] - ref).abs().max()
    assert out["image"][0].dtype == torch.uint8 and out["image"][0].shape == (64, 64, 3)
    assert (out["image"][0].float() - (ref * 255).round()).abs().max() <= 1
    assert [s.tolist() for s in out["step"]] == [[1, 3], [2, 3], [3, 3]]  # step events, in order


def test_cfg_parallel_across_two_replicas_equals_one_replica(mesh):
    single = generate(mesh, request("sd3", rid="single", steps=4))
    parallel = generate(mesh, request("sd3_cfgp", rid="cfgp", steps=4))
    assert torch.allclose(single["image_float"][0], parallel["image_float"][0], atol=1e-5)
    assert [s.tolist() for s in parallel["step"]] == [s.tolist() for s in single["step"]]


@pytest.mark.parametrize("model", ["sd3", "sd3_fused"])
def test_concurrent_requests_of_different_steps_and_sizes_get_their_solo_results(mesh, model):
    def req(i, steps, w, h, seed):
        return request(model, rid=f"c{i}", steps=steps, width=w, height=h, seed=seed)

    solo = [generate(mesh, req(f"solo{i}", *spec)) for i, spec in enumerate(WORKLOAD)]

    async def main():
        async with grpc.aio.insecure_channel(mesh.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(i, spec):
                return collect([ev async for ev in stub.Generate(req(i, *spec), timeout=60)])

            return await asyncio.gather(*(one(i, spec) for i, spec in enumerate(WORKLOAD)))

    for (steps, w, h, _), alone, together in zip(WORKLOAD, solo, asyncio.run(main())):
        assert together["image_float"][0].shape == (h, w, 3)
        assert torch.allclose(together["image_float"][0], alone["image_float"][0], atol=1e-5), (steps, w, h)
        assert (together["image"][0].int() - alone["image"][0].int()).abs().max() <= 1
        assert [s.tolist() for s in together["step"]] == [[k, steps] for k in range(1, steps + 1)]


@pytest.mark.parametrize("model", ["sd3", "sd3_cfgp", "sd3_fused"])
def test_cancel_mid_loop_frees_state_everywhere(mesh, model):
    with grpc.insecure_channel(mesh.address) as channel:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(request(model, rid=f"cancel-{model}", steps=500))
        next(call), next(call)  # two step events: the loop is running
        open_now = mesh.open_requests()
        assert open_now["main"] == 1 and open_now["dit_b"] == (1 if model == "sd3_cfgp" else 0), open_now
        call.cancel()
    assert wait_until(lambda: mesh.conductor_requests() == 0, 5.0)
    assert wait_until(lambda: mesh.open_requests() == {"main": 0, "dit_b": 0}, 5.0)
    # the services still serve (no queued work of the cancelled request is left behind)
    assert [s.tolist() for s in generate(mesh, request(model, rid=f"after-{model}", steps=1))["step"]] == [[1, 1]]


@pytest.mark.parametrize("params, field", [
    ({"width": 50}, "params.width"), ({"height": 40}, "params.height"), ({"steps": 0}, "params.steps"),
    ({"steps": -2}, "params.steps"), ({"guidance": math.nan}, "params.guidance"),
    ({"steps": 1001}, "params.steps"),
])
@pytest.mark.parametrize("model", ["sd3", "sd3_fused"])
def test_bad_input_is_invalid_argument_naming_the_field(mesh, model, params, field):
    with grpc.insecure_channel(mesh.address) as channel:
        err = rpc_error(conductor_pb2_grpc.ConductorStub(channel).Generate(request(model, **params), timeout=30))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.details(), err.details()
    assert wait_until(lambda: mesh.open_requests() == {"main": 0, "dit_b": 0}, 5.0)


def test_unknown_model_names_the_model(mesh):
    with grpc.insecure_channel(mesh.address) as channel:
        err = rpc_error(conductor_pb2_grpc.ConductorStub(channel).Generate(request("nope"), timeout=10))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "model 'nope'" in err.details()


def test_starmesh_imagine_writes_the_png_with_a_progress_bar(mesh, tmp_path):
    out = tmp_path / "fox.png"
    cmd = [sys.executable, "-m", "cli", "imagine", "--conductor", mesh.address, "--model", "sd3",
           "--prompt", tiny_sd3.PROMPT, "--negative-prompt", tiny_sd3.NEGATIVE, "-o", str(out),
           "--steps", "3", "--guidance", "5", "--seed", "7", "--size", "64x64", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["path"] == str(out) and report["num_steps"] == 3 and report["latency_ms"] > 0
    assert "3/3" in done.stderr  # the bar, fed by step events
    from PIL import Image

    with Image.open(out) as png:
        pixels = torch.tensor(list(png.getdata()), dtype=torch.uint8).view(64, 64, 3)
    assert torch.equal(pixels, generate(mesh, request(rid="png"))["image"][0])
    assert os.path.getsize(out) > 0


def test_text_dit_and_vae_as_separate_services_pass_conditioning_through_shm():
    """One service per component (registered names), default inline threshold: the
    prompt embeddings ([1, 77 + 256, 64] fp32 = 85 KB) go text -> dit through shm."""
    from conductor.service import ConductorService
    from pipelines.sd3.model import served_model
    from runtime.background import BackgroundServer
    from cluster.registry import build_component
    from tests.fixtures.services import start_in_process

    with tiny_sd3.one_thread():
        servers = [start_in_process(build_component(name, checkpoint=tiny_sd3.checkpoint()))
                   for name in ("text_encoder", "dit", "vae")]
        conductor = BackgroundServer(ConductorService([served_model("sd3", *(s.address for s in servers))]))
        conductor.start()
        try:
            with grpc.insecure_channel(conductor.address) as channel:
                out = collect(conductor_pb2_grpc.ConductorStub(channel).Generate(request(rid="split"), timeout=60))
            freed = wait_until(lambda: all(s.hosted.transport.arena.num_leases == 0 for s in servers), 5.0)
            text_leases_made = servers[0].hosted.transport.arena._next_id - 1  # lease ids handed out
        finally:
            conductor.stop()
            for s in servers:
                s.stop()
    assert torch.allclose(out["image_float"][0], tiny_sd3.reference_image(), atol=1e-4)
    assert text_leases_made >= 2  # prompt_embeds and negative_prompt_embeds went by shm
    assert freed  # the request's leases were freed when it ended
