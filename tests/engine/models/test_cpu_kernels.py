"""The compiled CPU decode kernel (engine/attention/csrc/paged_decode.cpp): the same
attention as dense causal attention and as the plain torch path, read in place from the
paged cache; bad inputs raise instead of reading out of bounds."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from engine.attention import cpu_kernels
from engine.attention.torch_backend import TorchAttentionBackend, paged_attention, plan_attention
from tests.engine.models.test_attention import (HEAD_DIM, NUM_HEADS, SPREAD, SPREAD_QUERY, _check_against_dense,
                                                _mixed_step)


@pytest.fixture(scope="module")
def kernel():
    op = cpu_kernels.paged_decode()
    # the machines this runs on have a C++ compiler (scripts/setup.sh): a missing kernel
    # here means the build broke, not that the fallback should be tested instead
    assert op is not None, "the CPU kernels did not build (see the warning above)"
    return op


def test_mixed_step_decodes_through_the_kernel_match_dense(kernel):
    meta, k_cache, v_cache, full_k, full_v = _mixed_step()
    plan = plan_attention(meta, kernel=True)
    assert plan.kernel is not None and plan.kernel.rows.tolist() == [0, 1] and not plan.decode
    _check_against_dense(meta, k_cache, v_cache, full_k, full_v, plan)


@pytest.mark.parametrize("decode_only", [False, True])
def test_spread_lengths_match_dense_without_padding(kernel, decode_only):
    history = {s: c for s, c in SPREAD.items() if not decode_only or SPREAD_QUERY[s] == 1}
    meta, k_cache, v_cache, full_k, full_v = _mixed_step(history, SPREAD_QUERY, num_blocks=400)
    plan = plan_attention(meta, kernel=True)
    assert (plan.kernel.rows is None) == decode_only
    _check_against_dense(meta, k_cache, v_cache, full_k, full_v, plan)


def _decode_inputs(dtype=torch.float32, seed=0):
    meta, k_cache, v_cache, *_ = _mixed_step(SPREAD, {s: 1 for s in SPREAD}, num_blocks=400)
    q = torch.randn(meta.num_seqs, NUM_HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(seed))
    return q.to(dtype), k_cache.to(dtype), v_cache.to(dtype), meta


def test_kernel_equals_the_torch_path(kernel):
    q, k_cache, v_cache, meta = _decode_inputs()
    scale = HEAD_DIM ** -0.5
    ours = paged_attention(q, k_cache, v_cache, meta, scale, plan_attention(meta, kernel=True))
    torch_path = paged_attention(q, k_cache, v_cache, meta, scale, plan_attention(meta))
    torch.testing.assert_close(ours, torch_path, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_caches_accumulate_in_fp32(kernel, dtype):
    q, k_cache, v_cache, meta = _decode_inputs(dtype)
    scale = HEAD_DIM ** -0.5
    out = kernel(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, scale)
    ref = kernel(q.float(), k_cache.float(), v_cache.float(), meta.block_tables, meta.seq_lens, scale)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)  # one rounding of the output


def test_threads_split_the_work_without_changing_it(kernel):
    q, k_cache, v_cache, meta = _decode_inputs()
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, 0.3)
        torch.set_num_threads(2)
        two = kernel(q, k_cache, v_cache, meta.block_tables, meta.seq_lens, 0.3)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_bad_inputs_raise_instead_of_reading_out_of_bounds(kernel):
    q, k_cache, v_cache, meta = _decode_inputs()
    tables, lens = meta.block_tables.clone(), meta.seq_lens.clone()
    tables[0, 0] = k_cache.shape[0]
    with pytest.raises(RuntimeError, match="block id"):
        kernel(q, k_cache, v_cache, tables, lens, 1.0)
    lens[1] = tables.shape[1] * k_cache.shape[1] + 1
    with pytest.raises(RuntimeError, match="seq_len"):
        kernel(q, k_cache, v_cache, meta.block_tables, lens, 1.0)
    with pytest.raises(RuntimeError, match="int32"):
        kernel(q, k_cache, v_cache, meta.block_tables.long(), meta.seq_lens, 1.0)
    with pytest.raises(RuntimeError, match="dtype"):
        kernel(q.double(), k_cache, v_cache, meta.block_tables, meta.seq_lens, 1.0)


def test_disabled_kernels_leave_the_torch_path():
    code = ("from engine.attention.torch_backend import TorchAttentionBackend as B; "
            "print(B().use_kernel, B(use_kernel=False).use_kernel)")
    env = {**os.environ, "STARMESH_CPU_KERNELS": "0"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
    assert TorchAttentionBackend().use_kernel and not TorchAttentionBackend(use_kernel=False).use_kernel
