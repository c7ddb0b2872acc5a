"""A guess at step N+1's attention metadata, made while step N's kernels run.

Step N+1 cannot be scheduled before step N's tokens are sampled (a sequence may stop),
but its page table usually follows from step N alone: in steady decoding every
sequence that sampled goes on with one token at position seq_len_N, the scheduler
takes the running sequences in arrival order, and a sequence whose next token starts
a new block gets the pool's next free block (KVPool hands them out in order). The
engine plans attention for that guess while the GPU is busy; at step N+1 the backend
compares the guessed page table with the real one and uses the plan only if they are
equal (FlashInferBackend.plan), so a wrong guess costs a plan, never a wrong result.

Guesses are decode steps only: a step with prefill chunks still running is not guessed.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.attention.metadata import AttentionMetadata


def _stops_by_length(seq) -> bool:
    """Whether the token this step samples ends seq by a rule known before sampling
    (Sequence._stop_reason's "length" and "context"); EOS and stop ids are not known."""
    return (seq.num_output_tokens + 1 >= seq.params.max_new_tokens
            or seq.num_tokens + 1 >= seq.max_context)


def predict_next_decode(batch, pool, block_size: int) -> AttentionMetadata | None:
    """Host metadata of the decode step that follows `batch` if every sequence that samples
    this step goes on (those that stop by length excluded); None when step N+1 is not a
    plain continuation (prefill chunks left) or the pool cannot hold it.

    Called after step N is launched and before its postprocess: seq.block_table and the
    pool are as step N left them."""
    if not batch.seqs or not all(batch.sample_mask):
        return None
    order = sorted((s.arrival, i) for i, s in enumerate(batch.seqs))
    keep = [i for _, i in order if not _stops_by_length(batch.seqs[i])]
    if not keep:
        return None
    seq_lens = batch.seq_lens  # a fresh list per call
    positions = np.asarray([seq_lens[i] for i in keep], dtype=np.int64)  # [S'] the new tokens' positions
    tables = [list(batch.seqs[i].block_table) for i in keep]
    growing = [j for j, p in enumerate(positions.tolist()) if p // block_size >= len(tables[j])]
    if len(growing) > pool.num_free_blocks:
        return None  # the scheduler would preempt: not a plain continuation
    for j, block in zip(growing, pool.next_free_blocks(len(growing))):
        tables[j].append(block)
    width = max(len(t) for t in tables)
    block_tables = np.full((len(keep), width), -1, dtype=np.int32)  # [S', width]
    for j, t in enumerate(tables):
        block_tables[j, :len(t)] = t
    blocks = block_tables[np.arange(len(keep)), positions // block_size].astype(np.int64)
    return AttentionMetadata(
        query_start_loc=torch.arange(len(keep) + 1, dtype=torch.int32),
        seq_lens=torch.from_numpy((positions + 1).astype(np.int32)),
        block_tables=torch.from_numpy(block_tables),
        slot_mapping=torch.from_numpy(blocks * block_size + positions % block_size),
        block_size=block_size,
    )
