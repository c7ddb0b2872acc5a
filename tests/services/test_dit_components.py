"""The SD3 components in this process (no services): the walk graph equals diffusers'
StableDiffusion3Pipeline, precomputed embeddings give the same image, denoising runs of
several requests batch, the schedule is the scheduler's, bad input names its field."""
import asyncio
import math

import pytest
import torch

from conductor.executor_setup import inprocess_executor
from pipelines.sd3.model import DENOISE_LOOP, text_to_image_graph
from engine.models.sd3.guidance import guide
from services.sd3.colocated import sd3_components
from engine.models.sd3.params import ImageParams
from runtime.items import OpenNode
from tests.fixtures import tiny_sd3
from core.errors import InvalidArgument

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def comps():
    with tiny_sd3.one_thread():  # as a service runs them (--torch-threads 1)
        made = sd3_components(tiny_sd3.checkpoint())
        yield made
    for c in made:
        c.close()


def generate(comps, inputs: dict, params: dict, rid: str = "r", fused: bool = False) -> dict:
    async def main():
        out: dict = {}
        loops = {DENOISE_LOOP} if fused else set()
        async with inprocess_executor(text_to_image_graph(fused=fused), comps, loops) as ex:
            async for name, value in ex.generate(rid, {k: (v,) for k, v in inputs.items()}, params):
                out.setdefault(name, []).append(value)
        return out

    return asyncio.run(main())


@pytest.mark.parametrize("fused", [False, True], ids=["conductor_loop", "fused_loop"])
def test_inprocess_graph_equals_diffusers_pipeline(comps, fused):
    out = generate(comps, {"prompt": tiny_sd3.prompt_tensor()}, tiny_sd3.BASE, fused=fused)
    ref = tiny_sd3.reference_image()
    assert torch.allclose(out["image_float"][0], ref, atol=1e-4), (out["image_float"][0] - ref).abs().max()
    assert out["image"][0].dtype == torch.uint8 and out["image"][0].shape == (64, 64, 3)
    assert (out["image"][0].float() - (ref * 255).round()).abs().max() <= 1
    assert [s.tolist() for s in out["step"]] == [[1, 3], [2, 3], [3, 3]]


def test_precomputed_embeddings_give_the_prompt_walk_image(comps):
    pipe = tiny_sd3.reference_pipeline()
    embeds, negative, pooled, negative_pooled = pipe.encode_prompt(
        tiny_sd3.PROMPT, tiny_sd3.PROMPT, tiny_sd3.PROMPT, negative_prompt=tiny_sd3.NEGATIVE,
        negative_prompt_2=tiny_sd3.NEGATIVE, negative_prompt_3=tiny_sd3.NEGATIVE, max_sequence_length=16)
    inputs = {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled, "negative_prompt_embeds": negative,
              "negative_pooled_prompt_embeds": negative_pooled}
    params = {**tiny_sd3.BASE, "max_sequence_length": 16}
    from_embeds = generate(comps, inputs, params)["image_float"][0]
    assert torch.allclose(generate(comps, inputs, params, fused=True)["image_float"][0], from_embeds, atol=1e-5)
    from_prompt = generate(comps, {"prompt": tiny_sd3.prompt_tensor()}, params)["image_float"][0]
    assert torch.allclose(from_embeds, from_prompt, atol=1e-5)
    assert torch.allclose(from_prompt, tiny_sd3.reference_image(max_sequence_length=16), atol=1e-4)


def test_denoising_runs_of_two_requests_batch_and_keep_their_results(comps):
    batch_sizes = []
    hook = comps[1].model.transformer.register_forward_hook(lambda mod, args, kwargs, out: batch_sizes.append(
        kwargs["hidden_states"].shape[0]), with_kwargs=True)

    async def both():
        async with inprocess_executor(text_to_image_graph(), comps) as ex:
            async def one(rid, seed):
                params = {**tiny_sd3.BASE, "seed": seed}
                out = [v async for name, v in ex.generate(rid, {"prompt": (tiny_sd3.prompt_tensor(),)}, params)
                       if name == "image_float"]
                return out[0]
            return await asyncio.gather(one("a", 1), one("b", 2))

    try:
        a, b = asyncio.run(both())
    finally:
        hook.remove()
    assert sum(batch_sizes) == 2 * 3 * 2 and len(batch_sizes) <= 6  # both branches (and requests) share calls
    assert torch.allclose(a, tiny_sd3.reference_image(seed=1), atol=1e-4)
    assert torch.allclose(b, tiny_sd3.reference_image(seed=2), atol=1e-4)


def test_schedule_is_the_scheduler_one(comps):
    pipe = tiny_sd3.reference_pipeline()
    pipe.scheduler.set_timesteps(5)
    schedule = comps[1].model.schedule.get(5, (8, 8))
    assert torch.equal(schedule.timesteps, pipe.scheduler.timesteps)
    assert torch.equal(schedule.sigmas, pipe.scheduler.sigmas) and schedule.sigmas[-1] == 0


def test_renorm_caps_the_guided_norm_at_a_multiple_of_the_conditional_one():
    cond, uncond = torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)
    plain = guide(cond, uncond, 7.0)
    capped = guide(cond, uncond, 7.0, renorm=1.0)
    assert torch.equal(plain, uncond + 7.0 * (cond - uncond))
    norms = capped.flatten(1).norm(dim=1)
    assert torch.allclose(norms, cond.flatten(1).norm(dim=1), rtol=1e-5)
    assert torch.allclose(capped / capped.flatten(1).norm(dim=1).view(-1, 1, 1, 1),
                          plain / plain.flatten(1).norm(dim=1).view(-1, 1, 1, 1), atol=1e-6)


@pytest.mark.parametrize("params, field", [
    ({"steps": 0}, "params.steps"), ({"steps": -3}, "params.steps"), ({"steps": 2.5}, "params.steps"),
    ({"guidance": math.nan}, "params.guidance"), ({"guidance": "NaN"}, "params.guidance"),
    ({"width": 50}, "params.width"), ({"height": 72}, "params.height"), ({"renorm": -1}, "params.renorm"),
    ({"width": 1024}, "params.width"),  # past what the tiny DiT's position embedding covers
    ({"negative_prompt": 3}, "params.negative_prompt"), ({"max_sequence_length": 0}, "params.max_sequence_length"),
])
def test_bad_params_name_their_field(comps, params, field):
    item = OpenNode("bad", "init_latent", params={**tiny_sd3.BASE, **params})
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        comps[1].open(item, {})
    assert not comps[1].has_work()


def test_bad_tensors_name_their_input(comps):
    dit, vae = comps[1], comps[2]
    latent = torch.zeros(1, 4, 8, 8)
    run = OpenNode("bad", "denoise_cond", iteration=(0,), params=tiny_sd3.BASE)
    with pytest.raises(InvalidArgument, match=r"open.inputs\[latent\]"):
        dit.open(run, {"latent": torch.zeros(1, 4, 4, 8), "embeds": torch.zeros(1, 5, 64),
                       "pooled": torch.zeros(1, 48)})
    with pytest.raises(InvalidArgument, match="embeds"):
        dit.open(run, {"latent": latent, "embeds": torch.zeros(1, 5, 63), "pooled": torch.zeros(1, 48)})
    with pytest.raises(InvalidArgument, match=r"open.iteration"):
        dit.open(OpenNode("bad", "combine", iteration=(3,), params=tiny_sd3.BASE), {})
    with pytest.raises(InvalidArgument, match=r"open.inputs\[latent\]"):
        vae.open(OpenNode("bad", "decode", params=tiny_sd3.BASE), {"latent": torch.zeros(1, 3, 8, 8)})
    with pytest.raises(InvalidArgument, match=r"open.inputs\[prompt\]"):
        comps[0].open(OpenNode("bad", "t5", params=tiny_sd3.BASE), {"prompt": torch.tensor([0xff], dtype=torch.uint8)})
    assert not any(c.has_work() for c in comps)


def test_image_params_defaults_follow_diffusers():
    p = ImageParams.from_params({})
    assert (p.steps, p.guidance, p.width, p.height, p.max_sequence_length) == (28, 7.0, 1024, 1024, 256)
    assert ImageParams.from_params({"steps": 4.0, "seed": 3.0}).steps == 4


def test_imagine_in_process_writes_the_png(comps, tmp_path, capsys):
    from PIL import Image

    from cli.main import main

    out = tmp_path / "fox.png"
    args = ["imagine", "--checkpoint", tiny_sd3.checkpoint(), "--prompt", tiny_sd3.PROMPT, "--negative-prompt",
            tiny_sd3.NEGATIVE, "-o", str(out), "--steps", "3", "--guidance", "5", "--seed", "7", "--size", "64x64"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "3/3" in captured.err and str(out) in captured.out
    with Image.open(out) as png:
        assert png.size == (64, 64) and png.mode == "RGB"
        pixels = torch.tensor(list(png.getdata()), dtype=torch.uint8).view(64, 64, 3)
    assert (pixels.float() - (tiny_sd3.reference_image() * 255).round()).abs().max() <= 1
    assert main(["imagine", "--checkpoint", "x", "--prompt", "p", "-o", str(out), "--size", "64by64"]) == 2
