"""Prefix caching and kept contexts through the mesh: a real thinker service behind the
conductor. A shared system prompt is cached for the next request (counted in engine
prefill tokens, not timed); a conversation continued from its kept context gives the
same greedy ids as the whole history re-sent; a context is its owner's alone."""
import asyncio
import re

import pytest

from client.call_failed import CallFailed
from client.events import TextDelta, Usage
from client.generate_call import GenerateCall
from client.session import ConductorSession
from conductor.placement import Placement
from conductor.service import ConductorService
from pipelines.text_generation import text_model
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from tests.fixtures import registry
from tests.fixtures.services import describe, start_side_by_side

pytestmark = pytest.mark.timeout(240)
BLOCK = 16


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    from engine.checkpoints.tiny_text import make_tiny

    ckpt = str(tmp_path_factory.mktemp("qwen3"))
    make_tiny("qwen3", ckpt, vocab_size=512, max_position_embeddings=1024)
    proc = ServiceProcess("thinker", ["--checkpoint", ckpt, "--option", f"block_size={BLOCK}"], name="thinker").start()
    registry.register(proc.address, describe(proc.address).arena)
    placement = Placement.from_dict({
        "services": {"thinker": {"replicas": [proc.address]}},
        "placement": {"prefill": "thinker", "decode": "thinker"},
        "kv_contexts": {"thinker": ["prefill", "decode"]}})
    service = ConductorService([text_model("tiny", placement)])
    server = BackgroundServer(service)
    server.start()
    yield server.address, proc, ckpt, service
    server.stop()
    registry.unregister(proc.address)
    proc.stop()


def ask(address: str, ids, max_new_tokens: int = 6, end_user: str = "", key: str = "", **params):
    """(output ids, Usage) of one greedy request."""
    async def main():
        async with ConductorSession(address) as session:
            call = GenerateCall("tiny", input_ids=tuple(ids), end_user=end_user,
                                params={"max_new_tokens": max_new_tokens, "ignore_eos": True, **params})
            out, usage = [], None
            async for ev in session.generate(call, f"Bearer {key}" if key else ""):
                if isinstance(ev, TextDelta):
                    out += ev.token_ids
                elif isinstance(ev, Usage):
                    usage = ev
            return out, usage

    return asyncio.run(main())


def cold(ckpt: str, ids, max_new_tokens: int) -> list[int]:
    """The same greedy request on an engine alone, without the prefix cache."""
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, prefix_cache=False))
    return engine.generate([list(ids)], SamplingParams(max_new_tokens=max_new_tokens))[0]


def load(address: str) -> dict:
    return dict(describe(address).load)


def test_a_shared_system_prompt_is_computed_once(mesh):
    address, proc, ckpt, _ = mesh
    system = [(7 * i + 3) % 500 for i in range(5 * BLOCK + 3)]  # 5 full blocks and a partial one
    before = load(proc.address)
    first, u1 = ask(address, system + [11, 12, 13])
    mid = load(proc.address)
    second, u2 = ask(address, system + [21, 22])
    after = load(proc.address)
    assert u1.cached_prompt_tokens == 0
    assert u2.cached_prompt_tokens == 5 * BLOCK  # the full blocks; the partial one is computed again
    computed_first = mid["prompt_tokens_computed_total"] - before["prompt_tokens_computed_total"]
    computed_second = after["prompt_tokens_computed_total"] - mid["prompt_tokens_computed_total"]
    assert computed_first == len(system) + 3 and computed_second == len(system) + 2 - 5 * BLOCK
    # the answers equal cold ones: an engine without the cache, on the same checkpoint
    assert first == cold(ckpt, system + [11, 12, 13], 6) and second == cold(ckpt, system + [21, 22], 6)


def test_a_continued_conversation_equals_the_history_resent(mesh):
    address, _, ckpt, service = mesh
    turns = [[40 + i for i in range(9)], [90, 91, 92], [130 + i for i in range(20)]]
    history, context = [], None
    for turn in turns:
        params = {"keep_context": True, **({"context_id": context} if context else {})}
        out, usage = ask(address, turn, 5, **params)
        assert usage.context_id.startswith("ctx_") and usage.context_id != context
        if context:  # everything said before this turn came from the context
            assert usage.cached_prompt_tokens >= len(history) - 1
        history += turn
        assert out == cold(ckpt, history, 5)
        history += out
        context = usage.context_id
    assert service.selectors["tiny"].num_pinned == 0  # every request's pins went with it


def test_a_context_is_its_owners_alone(mesh):
    address, _, _, _ = mesh
    _, usage = ask(address, [5, 6, 7], 3, end_user="alice", keep_context=True)
    ask(address, [8], 2, end_user="alice", context_id=usage.context_id)  # the owner continues it
    with pytest.raises(CallFailed) as foreign:
        ask(address, [8], 2, end_user="mallory", context_id=usage.context_id)
    unknown_id = "ctx_" + "0" * 32
    with pytest.raises(CallFailed) as unknown:
        ask(address, [8], 2, end_user="alice", context_id=unknown_id)
    # another owner learns exactly what a made-up id would tell: nothing
    assert foreign.value.code == unknown.value.code == "NOT_FOUND"
    def said(e, context_id):  # the message, less the id and where the run sat in its batch
        return re.sub(r"items\[\d+\]", "items[k]", e.value.message.replace(context_id, "ID"))

    assert said(foreign, usage.context_id) == said(unknown, unknown_id)
    with pytest.raises(CallFailed) as e:
        ask(address, [8], 2, context_id="not-an-id")
    assert e.value.code == "INVALID_ARGUMENT" and "params.context_id" in str(e.value)


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    from engine.checkpoints.tiny_text import make_tiny

    ckpt = str(tmp_path_factory.mktemp("qwen3-two"))
    make_tiny("qwen3", ckpt, vocab_size=512, max_position_embeddings=1024)
    procs = [ServiceProcess("thinker", ["--checkpoint", ckpt, "--option", f"block_size={BLOCK}"],
                            name=f"thinker{i}") for i in range(2)]
    start_side_by_side(procs)
    for p in procs:
        registry.register(p.address, describe(p.address).arena)
    placement = Placement.from_dict({
        "services": {"thinker": {"replicas": [p.address for p in procs]}},
        "placement": {"prefill": "thinker", "decode": "thinker"},
        "kv_contexts": {"thinker": ["prefill", "decode"]}})
    server = BackgroundServer(ConductorService([text_model("tiny", placement)]))
    server.start()
    yield server.address, procs
    server.stop()
    for p in procs:
        registry.unregister(p.address)
        p.stop()


def test_requests_go_where_their_prefix_or_context_is(two_replicas):
    """Without a preference the two replicas take turns (least loaded, round-robin); a
    prompt whose prefix one replica holds, and a context one replica keeps, go there."""
    address, procs = two_replicas
    system = [(5 * i + 1) % 500 for i in range(4 * BLOCK)]
    hits = []
    for k in range(4):
        _, usage = ask(address, system + [100 + k])
        hits.append(usage.cached_prompt_tokens)
    assert hits == [0] + [4 * BLOCK] * 3  # the system prompt's 4 full blocks, cached where they went
    served = [load(p.address)["prompt_tokens_computed_total"] for p in procs]
    assert sorted(served)[0] == 0  # one replica computed every one of them
    _, kept = ask(address, [9, 8, 7], keep_context=True)
    for _ in range(3):
        _, usage = ask(address, [6], context_id=kept.context_id)
        assert usage.cached_prompt_tokens >= 3
