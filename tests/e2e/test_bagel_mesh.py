"""BAGEL through real services on loopback (tests/e2e/bagel_mesh.py) equals the in-process
runner (pipelines/bagel/runner.py) on the same tiny checkpoint: text ids identical, the
float image within 1e-5 and the uint8 one within 1 LSB (the VAE service rounds, the runner
truncates as upstream does), with the branches on one backbone replica (the loop fused
into it, and fanned out by the conductor) and on two; every
KV block is free after a request ends, fails or is cancelled; bad input is
INVALID_ARGUMENT naming the field."""
from __future__ import annotations

import grpc
import pytest
import torch

from engine.models.bagel.params import BagelParams
from pipelines.bagel.runner import BagelRunner
from protos.starmesh.v1 import conductor_pb2_grpc
from tests.e2e.bagel_mesh import BagelMesh, bagel_mesh, request
from tests.e2e.image_mesh import collect, rpc_error
from tests.fixtures.services import wait_until
from tests.fixtures import tiny_bagel
from tests.pipelines.bagel_cases import image, load_parts

pytestmark = pytest.mark.timeout(300)
MODELS = ("bagel", "bagel_cfgp")
GUIDED = dict(steps=4, cfg_text_scale=3.0, cfg_img_scale=2.0, cfg_interval_start=0.0, seed=3)


@pytest.fixture(scope="module")
def setup():
    directory = tiny_bagel.checkpoint()
    with bagel_mesh(directory) as mesh:
        yield mesh, BagelRunner(load_parts(directory))


def generate(mesh: BagelMesh, req) -> dict:
    with grpc.insecure_channel(mesh.address) as channel:
        return collect(conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=120))


def _all_blocks_free(mesh: BagelMesh) -> bool:
    """No request holds a block on any backbone (kept contexts may)."""
    loads = [dict(info.load) for info in mesh.loads().values()]
    return all(int(load["kv_blocks_used"]) == int(load["context_blocks"]) and int(load["num_running"]) == 0
               for load in loads)


def _queried(mesh: BagelMesh) -> dict[str, int]:
    return {name: int(dict(info.load).get("rows_queried", 0)) for name, info in mesh.loads().items()}


def _same_image(out: dict, ref) -> None:
    torch.testing.assert_close(out["image_float"][0], ref.image_float, atol=1e-5, rtol=1e-5)
    assert out["image"][0].dtype == torch.uint8 and out["image"][0].shape == ref.image.shape
    assert (out["image"][0].int() - ref.image.int()).abs().max() <= 1


@pytest.mark.parametrize("model", MODELS)
def test_generate_equals_the_runner(setup, model):
    mesh, runner = setup
    params = dict(GUIDED, width=48, height=32, cfg_renorm_type="channel")
    queried = _queried(mesh)
    out = generate(mesh, request(model, "a red fox", rid=f"gen-{model}", **params))
    ref = runner.run(["a red fox"], BagelParams(**params))
    _same_image(out, ref)
    grew = {name for name, n in _queried(mesh).items() if n > queried[name]}
    assert grew == ({"main", "cfg_b"} if model == "bagel_cfgp" else {"main"})  # where the branches ran
    assert [s.tolist() for s in out["step"]] == [[1, 3], [2, 3], [3, 3]]
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


def test_the_fused_loop_draws_the_fan_out_loops_image(setup):
    """The same edit (three branches) with the loop inside the backbone and driven by the
    conductor: the same image; the fused one makes no conductor hop per update. (Bit for bit
    when the fan-out's three velocity runs share a forward, as they do when queued together:
    tests/services/test_bagel_denoises.py; here the conductor's timing decides that.)"""
    mesh, _ = setup
    picture, params = image(50, 40, 1), dict(GUIDED, cfg_renorm_type="global")
    hops = mesh.edge_hops("bagel", "combine") + mesh.edge_hops("bagel", "velocity")
    fused = generate(mesh, request("bagel", "make it snowy", rid="fused", images=[picture], **params))
    fanned = generate(mesh, request("bagel_fanout", "make it snowy", rid="fanned", images=[picture], **params))
    torch.testing.assert_close(fused["image_float"][0], fanned["image_float"][0], atol=1e-6, rtol=1e-6)
    assert [s.tolist() for s in fused["step"]] == [s.tolist() for s in fanned["step"]] == [[1, 3], [2, 3], [3, 3]]
    assert mesh.edge_hops("bagel", "combine") + mesh.edge_hops("bagel", "velocity") == hops
    assert mesh.edge_hops("bagel_fanout", "combine") > 0
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


@pytest.mark.parametrize("model", MODELS)
def test_edit_equals_the_runner(setup, model):
    mesh, runner = setup
    picture = image(50, 40, 1)
    params = dict(GUIDED, cfg_renorm_type="text_channel")
    out = generate(mesh, request(model, "make it snowy", rid=f"edit-{model}", images=[picture], **params))
    ref = runner.run([picture, "make it snowy"], BagelParams(**params))
    _same_image(out, ref)
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


@pytest.mark.parametrize("model", MODELS)
def test_think_plans_then_draws_as_the_runner(setup, model):
    mesh, runner = setup
    params = dict(GUIDED, think=True, max_new_tokens=5, width=32, height=32)
    out = generate(mesh, request(model, "a fox", rid=f"think-{model}", **params))
    ref = runner.run(["a fox"], BagelParams(**params))
    assert out["text"][0].tolist() == ref.text_ids and ref.text_ids
    _same_image(out, ref)
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


def test_understand_and_chat_answer_the_runners_ids(setup):
    mesh, runner = setup
    picture = image(40, 60, 2)
    out = generate(mesh, request("bagel", "what is it?", rid="und", images=[picture], text_only=True,
                                 max_new_tokens=6))
    ref = runner.run([picture, "what is it?"], BagelParams(max_new_tokens=6), want_image=False)
    assert out["text"][0].tolist() == ref.text_ids and ref.text_ids
    out = generate(mesh, request("bagel", "hello", rid="chat", text_only=True, max_new_tokens=6))
    assert out["text"][0].tolist() == runner.run(["hello"], BagelParams(max_new_tokens=6), want_image=False).text_ids
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


@pytest.mark.parametrize("params, images, field", [
    (dict(steps=1), (), "params.steps"),
    (dict(cfg_text_scale=-1.0), (), "params.cfg_text_scale"),
    (dict(width=40, height=32), (), "params.width/height"),
    (dict(steps=3), ("garbage",), "open.inputs[image]"),
])
@pytest.mark.parametrize("model", MODELS)
def test_bad_input_is_invalid_argument_naming_the_field_and_nothing_leaks(setup, model, params, images, field):
    mesh, _ = setup
    req = request(model, "x", rid=f"bad-{model}-{field}", **params)
    if images:
        from services.encoder.media_list import pack_media
        from transport.codec import inline_ref
        from transport.ref_proto import ref_to_proto

        for name, tensor in pack_media([("image", b"not an image at all")]).items():
            ref_to_proto(inline_ref(tensor), req.inputs.add(name=name).tensor)
    with grpc.insecure_channel(mesh.address) as channel:
        err = rpc_error(conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=60))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.details(), err.details()
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


@pytest.mark.parametrize("model", MODELS)
def test_a_cancelled_request_frees_every_block(setup, model):
    mesh, _ = setup
    req = request(model, "a long one", rid=f"cancel-{model}", steps=200, width=64, height=64)
    with grpc.insecure_channel(mesh.address) as channel:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=120)
        steps = 0
        for ev in call:
            if ev.WhichOneof("kind") == "tensor" and ev.tensor.name == "step":
                steps += 1
                if steps == 2:
                    break  # the loop runs: the contexts exist
        assert steps == 2
        assert not _all_blocks_free(mesh)
        call.cancel()
    assert wait_until(lambda: _all_blocks_free(mesh), 20)


def test_list_models_shows_bagels_params_walks_and_outputs(setup):
    mesh, _ = setup
    from protos.starmesh.v1 import conductor_pb2 as pb

    with grpc.insecure_channel(mesh.address) as channel:
        models = conductor_pb2_grpc.ConductorStub(channel).ListModels(pb.ListModelsRequest(), timeout=30).models
    info = next(m for m in models if m.name == "bagel")
    params = {p.name: p for p in info.params}
    assert {"steps", "shift", "cfg_text_scale", "cfg_img_scale", "cfg_interval_start", "cfg_interval_end",
            "cfg_renorm_type", "cfg_renorm_min", "width", "height", "seed", "think"} <= set(params)
    assert params["steps"].min == 2 and params["steps"].default_value.number_value == 50
    assert set(info.walks) == {"understand", "chat", "generate", "edit", "edit_held"}
    assert {"prompt", "media", "media_parts"} <= set(info.inputs)
    assert set(info.output_modalities) == {pb.MODALITY_TEXT, pb.MODALITY_IMAGE}


def test_progress_arrives_as_step_events(setup):
    """Without raw outputs, each denoising update is a StepEvent (as SD3's path shows it)."""
    mesh, _ = setup
    from protos.starmesh.v1 import conductor_pb2 as pb

    req = request("bagel", "a fox", rid="steps", steps=4, width=32, height=32)
    del req.raw_outputs[:]
    with grpc.insecure_channel(mesh.address) as channel:
        events = list(conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=60))
    steps = [(e.step.step, e.step.num_steps) for e in events if e.WhichOneof("kind") == "step"]
    assert steps == [(1, 3), (2, 3), (3, 3)]
    images = [e.image for e in events if e.WhichOneof("kind") == "image"]
    assert images and images[0].width == 32 and images[0].height == 32


def test_a_follow_up_continues_the_kept_context_and_prefills_only_what_it_adds(setup):
    """"describe this image" (keep_context) then "now make it snowy" (context_id) through
    the mesh equals the runner's two requests; the follow-up computes only the image's VAE
    tokens and the instruction (the backbone's rows_written) and does not run the ViT on
    its image (the conductor knows the kept context holds it: the edit_held walk)."""
    import hashlib

    from tests.e2e.bagel_mesh import png

    from engine.contexts import ContextRequest
    from engine.models.bagel.preprocess import vae_resize
    from tests.pipelines.bagel_cases import VAE_RULE

    mesh, runner = setup
    picture = image(48, 40, 3)
    with grpc.insecure_channel(mesh.address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        events = list(stub.Generate(request("bagel", "describe this image", rid="keep", images=[picture],
                                            text_only=True, max_new_tokens=5, keep_context=True), timeout=60))
        kept = next(e.usage.context_id for e in events if e.WhichOneof("kind") == "usage")
        assert kept.startswith("ctx_")
        assert mesh.service.contexts.directory.media(kept) == {hashlib.sha256(png(picture)).hexdigest()}
        before = int(dict(mesh.loads()["main"].load)["rows_written"])
        encoded = mesh.edge_hops("bagel", "media_encoder")
        params = dict(GUIDED, seed=4)
        followed = list(stub.Generate(request("bagel", "now make it snowy", rid="follow", images=[picture],
                                              context_id=kept, **params), timeout=60))
        out = collect(followed)
        usage = next(e.usage for e in followed if e.WhichOneof("kind") == "usage")
    written = int(dict(mesh.loads()["main"].load)["rows_written"]) - before
    assert mesh.edge_hops("bagel", "media_encoder") == encoded > 0  # the ViT ran for the first, not again
    resized = vae_resize(picture, VAE_RULE)
    framed = len(runner.parts.framed("now make it snowy"))
    assert written == (resized.height // 16) * (resized.width // 16) + 2 + 2 * framed
    # gen took the understood context's rows and added the image's VAE rows (markers
    # included) and the instruction: what Usage says was cached and what was the prompt
    assert usage.cached_prompt_tokens > 0
    assert usage.prompt_tokens - usage.cached_prompt_tokens == (resized.height // 16) * (resized.width // 16) + 2 + framed
    first = runner.run([picture, "describe this image"], BagelParams(max_new_tokens=5), want_image=False,
                       context=ContextRequest(owner="t", keep=True))
    ref = runner.run([picture, "now make it snowy"], BagelParams(**params),
                     context=ContextRequest(owner="t", context_id=first.context_id))
    runner.kept.release(first.context_id, "t")
    _same_image(out, ref)
    assert wait_until(lambda: _all_blocks_free(mesh), 10)


def test_a_request_failing_on_one_replica_frees_its_blocks_on_the_other(setup):
    """A context kept on main alone, continued by the CFG-parallel placement: the cfg
    replica refuses it (NOT_FOUND naming params.context_id) and main, whose prefill may have
    built the request's contexts, holds none of its blocks after."""
    mesh, _ = setup
    with grpc.insecure_channel(mesh.address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        events = list(stub.Generate(request("bagel", "hello", rid="kept-main", text_only=True, max_new_tokens=3,
                                            keep_context=True), timeout=60))
        kept = next(e.usage.context_id for e in events if e.WhichOneof("kind") == "usage")
        err = rpc_error(stub.Generate(request("bagel_cfgp", "a fox", rid="half", context_id=kept, steps=3,
                                              width=32, height=32), timeout=60))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "params.context_id" in err.details(), err.details()
    assert wait_until(lambda: _all_blocks_free(mesh), 10)
