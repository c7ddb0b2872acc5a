"""The CPU-testable half of engine/cuda_graphs.py: capture sizes, which size a batch
replays, how a decode step is padded, and that padding rows neither read nor write a
real sequence's KV (a padded forward on the torch backend gives the unpadded logits)."""
from __future__ import annotations

import pytest
import torch

from engine.attention.flashinfer_backend import PageTable
from engine.models.loader import load_model
from engine.cuda_graphs import bucket_for, graph_batch_sizes, graph_unsupported_reason, is_decode_only, pad_decode
from engine.checkpoints.tiny_text import make_tiny
from tests.engine.models.paged import PagedDriver

pytestmark = pytest.mark.timeout(180)
SCRATCH = 32  # the driver's caches hold blocks 0..32; 32 is never handed to a sequence


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(make_tiny("qwen3", tmp_path_factory.mktemp("graphs-qwen3")))


def test_capture_sizes_are_powers_of_two_then_the_max():
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    assert graph_batch_sizes(48) == [1, 2, 4, 8, 16, 32, 48]
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(2) == [1, 2]


def test_a_batch_replays_the_smallest_size_that_holds_it():
    sizes = graph_batch_sizes(48)
    assert [bucket_for(n, sizes) for n in (1, 2, 3, 4, 5, 16, 17, 33, 48)] == [1, 2, 4, 4, 8, 16, 32, 48, 48]
    assert bucket_for(49, sizes) is None  # past the largest: eager


def _decode_step(driver: PagedDriver, lens: list[int]):
    """Prefill sequences of `lens` tokens, then the metadata of one decode step of all."""
    for seq, n in enumerate(lens):
        driver.step([(seq, list(range(1, n + 1)))])
    return driver.metadata([(seq, [7 + seq]) for seq in range(len(lens))])


def _driver(model) -> PagedDriver:
    driver = PagedDriver(model, num_blocks=SCRATCH + 1, block_size=4)
    driver.free.remove(SCRATCH)
    return driver


def test_padding_rows_read_token_0_and_write_only_the_scratch_block(model):
    ids, positions, meta = _decode_step(_driver(model), [5, 8, 3])
    assert is_decode_only(meta)
    p_ids, p_pos, padded = pad_decode(ids, positions, meta, 8, SCRATCH)
    assert p_ids.tolist() == ids.tolist() + [0] * 5 and p_pos.tolist() == positions.tolist() + [0] * 5
    assert padded.query_start_loc.tolist() == list(range(9))
    assert padded.seq_lens.tolist() == [6, 9, 4] + [1] * 5
    assert padded.slot_mapping.tolist() == meta.slot_mapping.tolist() + [SCRATCH * 4] * 5
    assert torch.equal(padded.block_tables[:3, :meta.block_tables.shape[1]], meta.block_tables)
    assert padded.block_tables[3:, 0].tolist() == [SCRATCH] * 5 and (padded.block_tables[3:, 1:] == -1).all()
    table, real = PageTable.of(padded), PageTable.of(meta)
    assert table.is_decode and torch.equal(table.indptr[:4], real.indptr)
    assert table.indices.tolist() == real.indices.tolist() + [SCRATCH] * 5  # one scratch page per padding row
    assert table.last_page_len.tolist() == real.last_page_len.tolist() + [1] * 5
    assert pad_decode(ids, positions, meta, 3, SCRATCH)[2].num_seqs == 3  # an exact fit adds nothing


def test_pad_decode_refuses_prefills_and_oversized_batches(model):
    driver = _driver(model)
    ids, positions, meta = driver.metadata([(0, [1, 2, 3])])
    assert not is_decode_only(meta)
    with pytest.raises(ValueError, match="decode step"):
        pad_decode(ids, positions, meta, 4, SCRATCH)
    ids, positions, meta = _decode_step(_driver(model), [2, 2, 2])
    with pytest.raises(ValueError, match="at most 2"):
        pad_decode(ids, positions, meta, 2, SCRATCH)


@torch.inference_mode()
def test_a_padded_decode_gives_the_unpadded_logits_and_leaves_real_kv_alone(model):
    """The driver's caches start as NaN: a padding row that read anything but the slot it
    wrote would make its logits NaN; one that wrote a real block would change the KV."""
    driver = _driver(model)
    ids, positions, meta = _decode_step(driver, [5, 8, 3])
    before = [(k.clone(), v.clone()) for k, v in driver.kv_caches]
    hidden, _ = model(ids, positions, meta, driver.kv_caches)
    expected, unpadded_kv = model.compute_logits(hidden), [(k.clone(), v.clone()) for k, v in driver.kv_caches]
    driver.kv_caches = before
    p_ids, p_pos, padded = pad_decode(ids, positions, meta, 8, SCRATCH)
    hidden, _ = model(p_ids, p_pos, padded, driver.kv_caches)
    logits = model.compute_logits(hidden)  # [8, V]
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits[:3], expected, atol=1e-5, rtol=1e-5)
    for (k, v), (uk, uv) in zip(driver.kv_caches, unpadded_kv):
        torch.testing.assert_close(k[:SCRATCH], uk[:SCRATCH], atol=1e-6, rtol=1e-6, equal_nan=True)
        torch.testing.assert_close(v[:SCRATCH], uv[:SCRATCH], atol=1e-6, rtol=1e-6, equal_nan=True)
        assert torch.isfinite(k[SCRATCH, 0]).all() and torch.isnan(k[SCRATCH, 1:]).all()  # slot 0 only


def test_models_that_sync_inside_the_forward_are_not_captured(model, tmp_path):
    assert graph_unsupported_reason(model) is None
    moe = load_model(make_tiny("qwen3_moe", tmp_path / "moe"))
    assert "MoE" in graph_unsupported_reason(moe)
