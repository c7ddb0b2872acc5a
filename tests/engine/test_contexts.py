"""Kept contexts on the LLM engine: continuing, forking (at any position), extending and
truncating one equal computing the same tokens from scratch; one owner's context is
NotFound to every other; the TTL and the block limits drop the least recently used
contexts and never a pinned one or one a live request continues; a dropped one says so."""
from __future__ import annotations

import random
import re

import pytest

from core.errors import InvalidArgument, NotFound
from engine.checkpoints.tiny_text import make_tiny
from engine.contexts import ContextRequest
from engine.llm_engine import EngineConfig, LLMEngine
from engine.sampling_params import SamplingParams
from tests.engine.prefix_workload import assert_same, randomize, recording, run

pytestmark = pytest.mark.timeout(300)

PARAMS = SamplingParams(max_new_tokens=5)
SEED = 7


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("contexts"), seed=SEED))


def engine(ckpt: str, **kw) -> LLMEngine:
    e = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, **{"block_size": 4, "num_blocks": 96, **kw}))
    randomize(e.model, SEED)
    return recording(e)


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(256) for _ in range(n)]


def scratch(ckpt: str, prompt: list[int], params=PARAMS):
    """The same tokens computed from nothing, cache off."""
    return run(engine(ckpt, prefix_cache=False), {"x": prompt}, params)["x"]


def keep(e: LLMEngine, prompt: list[int], owner: str = "alice", rid: str = "k", **use) -> str:
    out = run(e, {rid: prompt}, PARAMS, context=ContextRequest(owner, keep=True, **use))[rid]
    assert out.context_id is not None
    return out.context_id


def cont(e: LLMEngine, cid: str, new: list[int], owner: str = "alice", rid: str = "c", **add):
    return run(e, {rid: new}, PARAMS, context=ContextRequest(owner, context_id=cid), **add)[rid]


def tokens(e: LLMEngine, cid: str, owner: str = "alice") -> list[int]:
    return list(e.contexts.get(cid, owner).content.token_ids)


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_continuing_a_kept_context_equals_computing_it_from_scratch(ckpt, prefix_cache):
    e = engine(ckpt, prefix_cache=prefix_cache)
    cid = keep(e, ids(22, 1))
    assert re.fullmatch(r"[0-9a-f]{32}", cid)
    full = tokens(e, cid)
    assert len(full) == 22 + PARAMS.max_new_tokens  # prompt + output; the last has no K/V yet
    assert e.contexts.info(cid, "alice").num_computed == len(full) - 1
    computed = e.num_prefill_tokens
    got = cont(e, cid, [9, 8, 7])
    assert got.num_cached_prompt_tokens == len(full) - 1
    assert e.num_prefill_tokens - computed == 4  # the output's last token and the three new ones
    assert_same(scratch(ckpt, full + [9, 8, 7]), got)
    assert e.scheduler.pool.num_used_blocks == len(e.contexts.get(cid, "alice").blocks)
    e.contexts.release(cid, "alice")
    assert e.scheduler.pool.num_used_blocks == 0


@pytest.mark.parametrize("at", [1, 7, 8, 13, 27])
def test_a_fork_at_any_position_equals_computing_its_tokens_from_scratch(ckpt, at):
    e = engine(ckpt)
    cid = keep(e, ids(22, 2))
    fork = e.contexts.fork(cid, "alice", at)
    assert fork != cid and tokens(e, fork) == tokens(e, cid)[:at]
    new = ids(5, 3)
    assert_same(scratch(ckpt, tokens(e, fork) + new), cont(e, fork, new, rid="f"))
    # the original is untouched by what the fork wrote (a shared last block was copied)
    assert_same(scratch(ckpt, tokens(e, cid) + new), cont(e, cid, new, rid="o"))
    e.check_integrity()


def test_truncate_then_extend_equals_computing_from_scratch(ckpt):
    e = engine(ckpt)
    cid = keep(e, ids(20, 4))
    sibling = e.contexts.fork(cid, "alice")
    e.contexts.truncate(cid, "alice", 10)  # mid-block: the last block is shared with the sibling
    assert tokens(e, cid) == tokens(e, sibling)[:10] and len(e.contexts.get(cid, "alice").blocks) == 3
    copies = e.scheduler.pool.num_copied
    rid = e.extend_context(cid, "alice", ids(6, 5))
    run(e, {}, PARAMS)  # steps the extension through
    assert e.scheduler.pool.num_copied > copies  # it wrote into the shared block's copy
    assert tokens(e, cid) == tokens(e, sibling)[:10] + ids(6, 5)
    assert e.contexts.info(cid, "alice").num_computed == 16 and rid.startswith("extend-")
    new = [1, 2, 3]
    assert_same(scratch(ckpt, tokens(e, cid) + new), cont(e, cid, new))
    assert_same(scratch(ckpt, tokens(e, sibling) + new), cont(e, sibling, new, rid="s"))
    for c in (cid, sibling):
        e.contexts.release(c, "alice")
    assert e.scheduler.pool.num_used_blocks == 0
    e.check_integrity()


def test_a_request_can_continue_and_keep_several_contexts(ckpt):
    e = engine(ckpt)
    a = keep(e, ids(9, 6), rid="a")
    b = keep(e, ids(13, 7), rid="b")
    c = run(e, {"c": [4, 4]}, PARAMS, context=ContextRequest("alice", context_id=a, keep=True, keep_id="turn-2"))["c"]
    assert c.context_id == "turn-2" and tokens(e, "turn-2")[:len(tokens(e, a))] == tokens(e, a)
    assert_same(scratch(ckpt, tokens(e, b) + [5]), cont(e, b, [5]))
    assert len(e.contexts) == 3 and e.cache_stats()["contexts_kept_total"] == 3
    with pytest.raises(InvalidArgument, match="keep_id 'turn-2'"):
        e.add_request("d", [1], PARAMS, context=ContextRequest("alice", keep=True, keep_id="turn-2"))


def test_another_owner_gets_not_found_for_every_operation(ckpt):
    e = engine(ckpt)
    cid = keep(e, ids(10, 8))
    calls = [lambda: e.contexts.get(cid, "mallory"), lambda: e.contexts.fork(cid, "mallory"),
             lambda: e.contexts.truncate(cid, "mallory", 2), lambda: e.contexts.release(cid, "mallory"),
             lambda: e.contexts.pin(cid, "mallory"), lambda: e.contexts.info(cid, "mallory"),
             lambda: e.extend_context(cid, "mallory", [1]),
             lambda: e.add_request("m", [1], PARAMS, context=ContextRequest("mallory", context_id=cid))]
    for call in calls:
        with pytest.raises(NotFound, match=f"context '{cid}' not found"):
            call()
    e.contexts.release(cid, "alice")
    with pytest.raises(NotFound, match="not found"):  # not even that it was dropped
        e.contexts.get(cid, "mallory")
    with pytest.raises(NotFound, match="was dropped: released by its owner"):
        e.contexts.get(cid, "alice")
    with pytest.raises(InvalidArgument, match="owner"):
        ContextRequest("")
    assert not e.has_work() and e.scheduler.pool.num_used_blocks == 0
