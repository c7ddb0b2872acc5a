"""Forwards that read a KV context without writing it (AttentionMetadata.write_kv /
ScheduledBatch.write_kv): the logits of a writing forward, a pool left bit for bit as it
was; guidance-style branches over one shared prefix, with experts and a segment."""
from __future__ import annotations

import pytest
import torch

from engine.batch import ScheduledBatch
from engine.model_runner import ModelRunner
from engine.models import Qwen3ForCausalLM
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from tests.engine.models.mot import VOCAB, feature_step, random_model, reference_hidden, share_prefix
from tests.engine.models.paged import PagedDriver

TEXT, LATENT = 0, 1


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _snapshot(caches) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(k.clone(), v.clone()) for k, v in caches]


def _assert_pool_unchanged(caches, before) -> None:
    """Bit for bit, NaNs included (PagedDriver's unwritten slots)."""
    for (k, v), (k0, v0) in zip(caches, before):
        assert torch.equal(k.view(torch.int32), k0.view(torch.int32))
        assert torch.equal(v.view(torch.int32), v0.view(torch.int32))


@pytest.mark.parametrize("num_new", [1, 2, 6])
def test_no_write_forward_equals_a_writing_forward_and_leaves_the_pool_unchanged(num_new):
    model = random_model(Qwen3ForCausalLM, attention_bias=False)
    driver = PagedDriver(model, block_size=4)
    driver.step([(0, _ids(10, 1))])  # the cached context, 10 tokens over 3 blocks
    before = _snapshot(driver.kv_caches)
    new = _ids(num_new, 2)
    input_ids, positions, meta = feature_step(driver, [(0, new)], writes=[False])
    read_only, _ = model(input_ids, positions, meta, driver.kv_caches)
    _assert_pool_unchanged(driver.kv_caches, before)
    assert driver.lens[0] == 10
    written, _ = driver.step([(0, new)])  # the same tokens, stored this time
    torch.testing.assert_close(model.compute_logits(read_only), written, atol=1e-5, rtol=1e-5)


def test_guidance_branches_read_one_prefix_in_one_step_without_writing_it():
    """BAGEL's shape of a denoising step: the context (text, expert 0) is cached once; two
    branches put their image latents (expert 1, one bidirectional segment) over it without
    writing, batched with a text decode that does write."""
    model = random_model(seed=3)
    driver = PagedDriver(model, block_size=4)
    prompt = _ids(9, 4)
    input_ids, positions, meta = feature_step(driver, [(0, prompt)])
    model(input_ids, positions, meta, driver.kv_caches, expert_ids=torch.zeros(9, dtype=torch.int64))
    for branch in (1, 2):
        share_prefix(driver, 0, branch)
    before = _snapshot(driver.kv_caches)
    latents = {1: _ids(6, 5), 2: _ids(6, 6)}
    chunks = [(1, latents[1]), (0, [17]), (2, latents[2])]
    input_ids, positions, meta = feature_step(driver, chunks, writes=[False, True, False],
                                              segments=[[1] * 6, [0], [1] * 6])
    expert_ids = torch.tensor([LATENT] * 6 + [TEXT] + [LATENT] * 6)
    hidden, _ = model(input_ids, positions, meta, driver.kv_caches, expert_ids=expert_ids)
    for rows, seq in ((slice(0, 6), 1), (slice(7, 13), 2)):
        ref = reference_hidden(model, prompt + latents[seq], [TEXT] * 9 + [LATENT] * 6, [0] * 9 + [1] * 6)
        torch.testing.assert_close(hidden[rows], ref[9:], atol=2e-5, rtol=2e-5)
    ref = reference_hidden(model, prompt + [17], [TEXT] * 10, [0] * 10)
    torch.testing.assert_close(hidden[6:7], ref[9:], atol=2e-5, rtol=2e-5)
    # only the decode's slot changed: position 9 of sequence 0
    slot = int(meta.slot_mapping[6])
    for (k, v), (k0, v0) in zip(driver.kv_caches, before):
        for now, then in ((k, k0), (v, v0)):
            then.view(-1, *then.shape[2:])[slot] = now.view(-1, *now.shape[2:])[slot]
    _assert_pool_unchanged(driver.kv_caches, before)


def _sequence(rid: str, ids: list[int], blocks: list[int], cached: int) -> Sequence:
    seq = Sequence(rid, ids, SamplingParams(), 0, 256, VOCAB)
    seq.block_table, seq.num_cached_tokens = list(blocks), cached
    return seq


def test_model_runner_carries_batch_features_to_the_step():
    model = random_model(seed=4)
    runner = ModelRunner(model, num_blocks=8, block_size=4)
    prompt, latents = _ids(6, 7), _ids(5, 8)
    text = _sequence("text", prompt, [3, 5], 0)
    runner.run(ScheduledBatch([text], [6], expert_ids=[[TEXT] * 6]), None)
    before = _snapshot(runner.kv_caches)
    # a branch over text's two blocks: its five latents need no block of their own
    branch = _sequence("branch", prompt + latents, [3, 5], 6)
    batch = ScheduledBatch([branch], [5], expert_ids=[[LATENT] * 5], segment_ids=[[2] * 5], write_kv=[False])
    _, _, meta = runner.prepare(batch, None)
    assert meta.slot_mapping.tolist() == [-1] * 5 and meta.write_kv.tolist() == [False]
    assert meta.segment_ids.tolist() == [2] * 5
    out = runner.run(batch, None)
    _assert_pool_unchanged(runner.kv_caches, before)
    ref = reference_hidden(model, prompt + latents, [TEXT] * 6 + [LATENT] * 5, [0] * 6 + [2] * 5)
    torch.testing.assert_close(out.logits, model.compute_logits(ref[-1:]), atol=1e-4, rtol=1e-4)


def test_scheduled_batch_checks_feature_lengths():
    seq = _sequence("a", [1, 2, 3], [0], 0)
    with pytest.raises(ValueError, match=r"expert_ids\[0\] has 2 ids for 3"):
        ScheduledBatch([seq], [3], expert_ids=[[0, 1]])
    with pytest.raises(ValueError, match="write_kv"):
        ScheduledBatch([seq], [3], write_kv=[True, False])
    assert not ScheduledBatch([seq], [3]).has_features
