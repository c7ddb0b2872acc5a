"""BAGEL's in-process runner (pipelines/bagel/runner.py, on the engine's paged KV pool)
against upstream's loop written out plainly (bagel_reference.py: dense masks, no paging,
no sharing), every walk on two tiny checkpoints: text ids identical, latents and pixels
within 1e-5 (fp32). Guidance settings are drawn per checkpoint (seeded, so a failure
reproduces)."""
from __future__ import annotations

import random

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.models.bagel.preprocess import vae_resize
from engine.models.bagel.request_contexts import RequestContexts
from pipelines.bagel.runner import BagelRunner
from tests.pipelines.bagel_cases import SPECS, VAE_RULE, build, image, load_parts, noise, reference_of

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="session", params=sorted(SPECS))
def bagel(request, tmp_path_factory):
    directory = build(tmp_path_factory.mktemp(f"bagel_{request.param}"), request.param)
    parts = load_parts(directory)
    return request.param, parts, BagelRunner(parts), reference_of(directory, parts)


def _params(case: str, **fixed) -> BagelParams:
    rng = random.Random(f"{case}-{sorted(fixed.items())}")
    drawn = dict(steps=rng.choice([4, 5]), shift=rng.choice([1.0, 3.0]), cfg_text_scale=rng.choice([2.5, 4.0]),
                 cfg_img_scale=rng.choice([1.0, 2.0]), cfg_interval_start=rng.choice([0.0, 0.4]),
                 cfg_renorm_type=rng.choice(["global", "channel", "text_channel"]),
                 cfg_renorm_min=rng.choice([0.0, 0.3]), max_new_tokens=6)
    return BagelParams(**{**drawn, **fixed})


def _check_image(out, ref) -> None:
    ids, text, latent, pixels, _ = ref
    assert out.text_ids == ids and out.text == text
    torch.testing.assert_close(out.latents, latent, **TOL)
    torch.testing.assert_close(out.image_float, pixels, **TOL)


def _all_free(runner: BagelRunner) -> None:
    assert not runner.kv.contexts and runner.kv.pool.num_used_blocks == 0
    runner.kv.check()


def test_generate_equals_upstreams_loop(bagel):
    case, _, runner, ref = bagel
    p = _params(case, width=48, height=32, cfg_img_scale=2.0)
    x0 = noise(32, 48, 1)
    out = runner.run(["a red fox in the snow"], p, latents=x0)
    assert out.walk == "generate" and out.image.shape == (32, 48, 3) and out.image.dtype == torch.uint8
    _check_image(out, ref.interleave(["a red fox in the snow"], p, True, noise=x0))
    _all_free(runner)


def test_edit_equals_upstreams_loop_at_the_resized_inputs_size(bagel):
    case, _, runner, ref = bagel
    p = _params(case, cfg_img_scale=2.0)
    picture = image(50, 37, 2)
    resized = vae_resize(picture, VAE_RULE)
    h, w = resized.height, resized.width
    x0, z = noise(h, w, 3), noise(h, w, 4)
    inputs = [picture, "make it snowy"]
    out = runner.run(inputs, p, latents=x0, image_latents=[z])
    assert out.walk == "edit" and out.image.shape == (h, w, 3)
    ref_out = ref.interleave(inputs, p, True, noise=x0, image_latents=[z])
    assert ref_out[4] == (h, w)
    _check_image(out, ref_out)
    _all_free(runner)


def test_understand_gives_upstreams_text_ids(bagel):
    case, _, runner, ref = bagel
    p = _params(case, max_new_tokens=8)
    inputs = ["look:", image(40, 60, 5), "what is in the picture?"]
    out = runner.run(inputs, p, want_image=False)
    ids, text = ref.interleave(inputs, p, False)
    assert out.walk == "understand" and out.text_ids == ids and out.text == text and len(ids) > 0
    _all_free(runner)


def test_think_plans_on_gen_then_draws(bagel):
    case, _, runner, ref = bagel
    p = _params(case, think=True, width=32, height=32, max_new_tokens=5)
    x0 = noise(32, 32, 6)
    out = runner.run(["a fox"], p, latents=x0)
    assert out.walk == "think" and len(out.text_ids) > 0
    _check_image(out, ref.interleave(["a fox"], p, True, noise=x0))
    _all_free(runner)


def test_a_seeded_run_is_the_run_given_its_documented_draws(bagel):
    """seed -> initial noise Generator(seed) [16, H/8, W/8]; the input image's posterior
    sample Generator(seed + 1); passing both explicitly gives the same image."""
    _, parts, runner, _ = bagel
    from engine.models.bagel.preprocess import normalize

    p = BagelParams(steps=3, seed=7, cfg_text_scale=2.0, cfg_img_scale=2.0)
    picture = image(48, 40, 8)
    seeded = runner.run([picture, "snow"], p)
    resized = vae_resize(picture, VAE_RULE)
    h, w = resized.height, resized.width
    x0 = torch.randn(16, h // 8, w // 8, generator=torch.Generator().manual_seed(7))
    pixels = (normalize(resized) * 0.5 + 0.5).permute(1, 2, 0)[None]
    z = parts.vae.encode(pixels, torch.Generator().manual_seed(8))[0]
    explicit = runner.run([picture, "snow"], p, latents=x0, image_latents=[z])
    assert torch.equal(seeded.latents, explicit.latents)
    assert not torch.equal(runner.run([picture, "snow"], BagelParams(steps=3, seed=9)).latents, seeded.latents)


def test_contexts_share_their_common_blocks_in_the_pool(bagel):
    """An edit's contexts: gen = [VAE image, ViT image, text], cfg_text = gen before the
    text, cfg_img = the text alone. cfg_text holds no block of its own except the one gen
    copied on its first write past the shared part; the pool counts say so."""
    _, parts, _, _ = bagel
    kv = BagelKV(parts.backbone, num_blocks=64, block_size=4)
    ctx = RequestContexts(kv, "share", parts.markers, guided=True)
    try:
        patches = torch.randn(6, 64)
        ctx.add_image((patches, torch.tensor([0, 1, 2, 64, 65, 66])), torch.randn(4, parts.backbone.config.hidden_size))
        ctx.add_text([parts.bos_id, 5, 6, 7, 8, 9, parts.eos_id])
        ctx.finish()
        gen, text, img = (ctx.context(n) for n in ("gen", "cfg_text", "cfg_img"))
        size = kv.pool.block_size
        assert text.num_cached_tokens == 8 + 6 and gen.num_cached_tokens == 8 + 6 + 7 and img.num_cached_tokens == 7
        shared = text.num_cached_tokens // size                    # full blocks gen and cfg_text both hold
        copied = int(text.num_cached_tokens % size != 0)           # gen's copy of the half-full one
        assert text.block_table[:shared] == gen.block_table[:shared]
        assert all(kv.pool.refcount(b) == 2 for b in gen.block_table[:shared])
        distinct = len(gen.block_table) + copied + len(img.block_table)
        assert kv.pool.num_used_blocks == distinct < sum(len(c.block_table) for c in (gen, text, img))
        kv.check()
    finally:
        ctx.free()
    assert not kv.contexts and kv.pool.num_used_blocks == 0


@pytest.mark.parametrize("bad, field", [
    (dict(steps=1), "params.steps"), (dict(cfg_text_scale=-1.0), "params.cfg_text_scale"),
    (dict(cfg_img_scale=-0.5), "params.cfg_img_scale"), (dict(cfg_renorm_type="l2"), "params.cfg_renorm_type"),
    (dict(cfg_interval_start=0.9, cfg_interval_end=0.5), "params.cfg_interval_start"),
])
def test_bad_params_are_refused_naming_the_field(bad, field):
    with pytest.raises(InvalidArgument, match=field):
        BagelParams.from_params(bad)


def test_bad_sizes_and_latents_are_refused_before_any_block_is_taken(bagel):
    _, _, runner, _ = bagel
    for size, match in (((40, 32), "multiples of 16"), ((32, 64 * 16 + 16), "max_latent_size")):
        with pytest.raises(InvalidArgument, match=match):
            runner.run(["x"], BagelParams(steps=2, width=size[0], height=size[1]))
    with pytest.raises(InvalidArgument, match="latents must be"):
        runner.run(["x"], BagelParams(steps=2, width=32, height=32), latents=torch.zeros(16, 2, 2))
    _all_free(runner)
