"""Prefix caching under Qwen3-Omni: the thinker hands out the same captured hidden states
and input embeddings for every prompt position with the cache cold or warm (the talker
reads them), media rows and multimodal rope ids are part of a block's name (a block is
reused only for the same image), and the talker engine (fed embedding rows) emits the
same frames cold, warm and partly evicted; on two random configurations each."""
from __future__ import annotations

import pytest
import torch

from core.errors import NotFound
from engine.contexts import ContextRequest
from engine.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.models.qwen3_omni import THINKER_PART
from engine.models.qwen3_omni.talker_engine import TalkerEngine
from engine.models.qwen3_omni.tiny import chat_prompt, make_tiny_omni, media_chat_prompt
from engine.prompt_media import PromptMedia
from engine.sampling_params import SamplingParams
from tests.engine.prefix_workload import assert_same, randomize, recording, run

pytestmark = pytest.mark.timeout(300)

TEXTS = ("Hello there", "Hello there, friend", "Hello you", "Tell me")
# a second talker: other depth and heads
OTHER_TALKER = dict(talker_text=dict(
    num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3, head_dim=8,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2],
                     "interleaved": True, "mrope_interleaved": True}))


@pytest.fixture(scope="module", params=["tiny", "other"])
def omni(request, tiny_omni, tmp_path_factory):
    """(checkpoint, weight seed) of two configurations."""
    if request.param == "tiny":
        return str(tiny_omni), 21
    return str(make_tiny_omni(tmp_path_factory.mktemp("omni-other") / "ckpt", seed=3, **OTHER_TALKER)), 22


def thinker(ckpt: str, seed: int, **kw) -> LLMEngine:
    e = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, text_part=THINKER_PART, capture_layer=1,
                                               return_embeddings=True, block_size=4, **kw))
    randomize(e.model, seed)
    return recording(e)


def assert_rows_same(ref, got) -> None:
    for kind in ("hidden", "embeds"):
        assert got.rows[kind].shape == ref.rows[kind].shape, kind
        torch.testing.assert_close(got.rows[kind], ref.rows[kind], atol=1e-5, rtol=0)


def test_thinker_rows_of_every_prompt_position_are_the_same_cold_and_warm(omni):
    ckpt, seed = omni
    prompts = {f"p{i}": chat_prompt(t) for i, t in enumerate(TEXTS)}
    params = SamplingParams(max_new_tokens=4)
    ref = run(thinker(ckpt, seed, prefix_cache=False), prompts, params)
    e = thinker(ckpt, seed, prefill_chunk_size=8)
    cold = run(e, prompts, params)
    warm = run(e, prompts, params)
    for rid, prompt in prompts.items():
        assert ref[rid].rows["hidden"].shape[0] == len(prompt) + 3  # every position fed once
        assert warm[rid].num_cached_prompt_tokens == (len(prompt) - 1) // 4 * 4
        for got in (cold[rid], warm[rid]):
            assert_same(ref[rid], got)
            assert_rows_same(ref[rid], got)
    assert e.scheduler.pool.num_used_blocks == 0
    alone = thinker(ckpt, seed)
    first, again = (run(alone, {"a": prompts["p1"]}, params)["a"] for _ in range(2))
    reused = again.num_cached_prompt_tokens  # handed out from the rows kept with the blocks: bit for bit
    assert reused > 0 and torch.equal(again.rows["hidden"][:reused], first.rows["hidden"][:reused])


def image_media(ids: list[int], start: int, count: int, seed: int, width: int = 64) -> PromptMedia:
    """An image of `count` patches (a 3-wide grid) at positions start.. of ids: its rows,
    one deepstack layer, and multimodal rope ids (text after it goes on past the grid)."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.arange(len(ids)).expand(3, -1).clone()
    i = torch.arange(count)
    pos[:, start:start + count] = torch.stack([torch.full((count,), start), start + i // 3, start + i % 3])
    after = int(pos[:, start:start + count].max()) + 1
    pos[:, start + count:] = (after + torch.arange(len(ids) - start - count)).expand(3, -1)
    at = torch.arange(start, start + count)
    return PromptMedia(pos, after - (start + count), at, torch.randn(count, width, generator=gen), at,
                       [torch.randn(count, width, generator=gen)])


def test_media_rows_are_part_of_a_blocks_name(omni):
    ckpt, seed = omni
    ids = media_chat_prompt("what is it", image_tokens=(6,))  # the patches at positions 4..9
    params = SamplingParams(max_new_tokens=4)
    media = {"same": image_media(ids, 4, 6, 1), "other": image_media(ids, 4, 6, 2)}
    ref = {k: run(thinker(ckpt, seed, prefix_cache=False), {k: ids}, params, media=m)[k] for k, m in media.items()}
    e = thinker(ckpt, seed)
    first = run(e, {"same": ids}, params, media=media["same"])["same"]
    other = run(e, {"other": ids}, params, media=media["other"])["other"]
    assert other.num_cached_prompt_tokens == 4  # the block before the image only
    again = run(e, {"same": ids}, params, media=media["same"])["same"]
    assert again.num_cached_prompt_tokens == (len(ids) - 1) // 4 * 4
    for key, got in (("same", first), ("other", other), ("same", again)):
        assert_same(ref[key], got)
        assert_rows_same(ref[key], got)


def talker(ckpt: str, seed: int, **kw) -> TalkerEngine:
    e = TalkerEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, block_size=4, **kw))
    randomize(e.model, seed)
    return recording(e)


def talk(engine: TalkerEngine, rows: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """Each text's greedy frames and code-0 logits (its whole thinker rows at once)."""
    for text, r in rows.items():
        engine.add_request(text, chat_prompt(text), engine.talker_params(max_new_tokens=12, temperature=0.0), embeds=r)
        engine.end_thinker(text)
    frames = {text: [] for text in rows}
    while engine.has_work():
        for out in engine.step():
            if out.frame is not None:
                frames[out.request_id].append(out.frame)
        engine.check_integrity()
    assert engine.scheduler.pool.num_used_blocks == 0
    return {t: (frames[t], torch.stack(engine.sampler.logits.pop(t))) for t in rows}


def test_talker_frames_are_unchanged_by_the_cache(omni):
    ckpt, seed = omni
    source = thinker(ckpt, seed, prefix_cache=False)
    rows = {t: run(source, {t: chat_prompt(t)}, SamplingParams(max_new_tokens=6))[t].rows["embeds"] for t in TEXTS}
    ref = talk(talker(ckpt, seed, prefix_cache=False, num_blocks=128), rows)
    e = talker(ckpt, seed, num_blocks=40)
    cold = talk(e, rows)
    computed = e.num_prefill_tokens
    warm = talk(e, rows)
    assert e.num_prefill_tokens - computed < computed
    talk(e, {f"{t}!": torch.cat([r, r]) for t, r in rows.items()})  # filler: evicts part of the cache
    assert e.scheduler.pool.num_evicted > 0
    partly = talk(e, rows)
    for text in TEXTS:
        for frames, logits in (cold[text], warm[text], partly[text]):
            assert frames == ref[text][0], text
            torch.testing.assert_close(logits, ref[text][1], atol=1e-4, rtol=0)


def test_the_talker_keeps_a_context_and_a_request_continues_it(tiny_omni):
    ckpt = str(tiny_omni)
    source = thinker(ckpt, 21, prefix_cache=False)
    rows = {t: run(source, {t: chat_prompt(t)}, SamplingParams(max_new_tokens=6))[t].rows["embeds"]
            for t in TEXTS[:2]}
    e = talker(ckpt, 21, num_blocks=64)
    params = e.talker_params(max_new_tokens=6, temperature=0.0)

    def speak(rid: str, text: str, use: ContextRequest) -> list:
        e.add_request(rid, chat_prompt(text), params, embeds=rows[text], context=use)
        e.end_thinker(rid)
        outs = []
        while e.has_work():
            outs += e.step()
            e.check_integrity()
        return outs

    cid = speak("t1", TEXTS[0], ContextRequest("me", keep=True))[-1].context_id
    kept = e.contexts.get(cid, "me").content
    # it keeps the positions it has input rows for: all of them computed (the last frame was never fed)
    assert kept.embeds.shape[0] == kept.num_tokens == kept.num_computed
    outs = speak("t2", TEXTS[1], ContextRequest("me", context_id=cid))
    assert outs[-1].is_finished and outs[0].num_cached_prompt_tokens == kept.num_computed
    assert any(o.frame for o in outs)
    with pytest.raises(NotFound, match="not found"):
        e.add_request("t3", chat_prompt("x"), params, context=ContextRequest("you", context_id=cid))
    e.contexts.release(cid, "me")
    assert e.scheduler.pool.num_used_blocks == 0
