"""Kept BAGEL contexts (engine/models/bagel/kept.py) through the in-process runner:
"describe this image", then "now make it snowy" continuing its context prefills only the
image's VAE tokens and the new instruction (the engine's row counters say so), and gives
what recomputing the same contexts from scratch gives; owners, release and expiry free
every block."""
from __future__ import annotations

import pytest
import torch

from core.errors import NotFound
from engine.contexts import ContextLimits, ContextRequest
from engine.models.bagel.kept import KeptContexts
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.models.bagel.preprocess import vae_resize
from pipelines.bagel.runner import BagelRunner, Framed, ImagePart
from tests.fixtures import tiny_bagel
from tests.pipelines.bagel_cases import VAE_RULE, image, load_parts


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def parts():
    return load_parts(tiny_bagel.checkpoint())


def _runner(parts, clock=None, **limits) -> BagelRunner:
    kv = BagelKV(parts.backbone, num_blocks=256, block_size=4)
    return BagelRunner(parts, kv, KeptContexts(kv, ContextLimits(**limits), **({"clock": clock} if clock else {})))


def _all_free(runner: BagelRunner) -> bool:
    runner.kv.check(runner.kept.holders())
    return not runner.kv.contexts and runner.kv.pool.num_used_blocks == 0


def test_a_follow_up_edit_prefills_only_what_it_adds_and_equals_recomputing(parts):
    runner = _runner(parts)
    picture = image(48, 40, 3)
    first = runner.run([picture, "describe this image"], BagelParams(max_new_tokens=5), want_image=False,
                       context=ContextRequest(owner="u", keep=True))
    assert first.context_id and first.text_ids
    params = BagelParams(steps=3, cfg_text_scale=3.0, cfg_img_scale=2.0, cfg_interval_start=0.0, seed=4)
    before = runner.kv.rows_written
    follow = runner.run([picture, "now make it snowy"], params,
                        context=ContextRequest(owner="u", context_id=first.context_id))
    resized = vae_resize(picture, VAE_RULE)
    vae_rows = (resized.height // 16) * (resized.width // 16) + 2      # its latent tokens and two markers
    instruction = len(parts.framed("now make it snowy"))               # into gen and into cfg_img
    assert runner.kv.rows_written - before == vae_rows + 2 * instruction
    answer = Framed((parts.bos_id, *first.text_ids, parts.eos_id))
    scratch = runner.run([ImagePart(picture, vae=False), "describe this image", answer,
                          ImagePart(picture, vit=False), "now make it snowy"], params)
    torch.testing.assert_close(follow.latents, scratch.latents, atol=1e-5, rtol=1e-5)
    runner.kept.release(first.context_id, "u")
    assert _all_free(runner)


def test_a_kept_context_is_its_owners_and_goes_when_released_or_expired(parts):
    clock = Clock()
    runner = _runner(parts, clock, ttl_s=60.0)
    kept = runner.run(["hello"], BagelParams(max_new_tokens=3), want_image=False,
                      context=ContextRequest(owner="a", keep=True)).context_id
    assert runner.kv.pool.num_used_blocks > 0 and len(runner.kept) == 1
    assert (runner.kept.kept_total, runner.kept.dropped_total) == (1, 0)  # contexts, not their two entries
    runner.kv.check(runner.kept.holders())
    for owner, cid in (("b", kept), ("a", "0" * 32)):
        with pytest.raises(NotFound, match="params.context_id"):
            runner.run(["again"], BagelParams(max_new_tokens=2), want_image=False,
                       context=ContextRequest(owner=owner, context_id=cid))
    again = runner.run(["again"], BagelParams(max_new_tokens=2), want_image=False,
                       context=ContextRequest(owner="a", context_id=kept))
    assert again.text_ids is not None
    clock.now += 61
    with pytest.raises(NotFound, match="dropped: unused for its TTL"):
        runner.run(["late"], BagelParams(max_new_tokens=2), want_image=False,
                   context=ContextRequest(owner="a", context_id=kept))
    assert (runner.kept.kept_total, runner.kept.dropped_total) == (1, 1)
    assert _all_free(runner)


def test_past_the_block_limit_the_least_recently_used_context_goes(parts):
    runner = _runner(parts, max_blocks=30)
    ids = []
    for i in range(3):  # each keeps gen and text_only, 27 rows = 7 blocks of 4 each
        ids.append(runner.run([f"turn {i} " * 3], BagelParams(max_new_tokens=2), want_image=False,
                              context=ContextRequest(owner="a", keep=True)).context_id)
        assert runner.kept.num_blocks <= 30
    assert len(runner.kept) == 2
    for cid in ids[1:]:
        assert runner.kept.get(cid, "a").context_id == cid
    runner.kv.check(runner.kept.holders())
    with pytest.raises(NotFound, match="dropped"):
        runner.kept.get(ids[0], "a")
    for cid in ids[1:]:
        runner.kept.release(cid, "a")
    assert (runner.kept.kept_total, runner.kept.dropped_total) == (3, 1)  # a release is not a drop
    assert _all_free(runner)
