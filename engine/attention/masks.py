"""Attention masks beyond causal: bidirectional segments (AttentionMetadata.segment_ids).

Rule. Query row r of a sequence sits at position p_r; it may attend to key position t
when t <= p_r (causal), or when t is a query token of the same sequence in the same step
whose segment id equals r's and is non-zero (bidirectional within the segment). Cached
tokens precede every query token, so a segment sees everything before it; a token after
a segment sees the whole segment. Segment ids are per query row of one step and local to
one sequence: a segment split across two steps is causal across the split, so whoever
builds steps keeps a segment within one step (an image's latent tokens, one prefill).

Both backends build their masks here: the torch backend per sequence (bool [Q, L]), the
FlashInfer backend as one flat custom mask (every sequence's [Q_i, L_i], row-major, in
sequence order), so both attend to exactly the same keys.
"""
from __future__ import annotations

import torch

from engine.attention.metadata import AttentionMetadata


def sequence_mask(segments: torch.Tensor, seq_len: int) -> torch.Tensor:
    """segments int [Q] (one sequence's query rows) -> allowed bool [Q, L = seq_len]."""
    query_len = segments.numel()
    device = segments.device
    cached = seq_len - query_len
    query_pos = torch.arange(cached, seq_len, device=device)
    allowed = torch.arange(seq_len, device=device)[None, :] <= query_pos[:, None]  # [Q, L] causal
    same = (segments[:, None] == segments[None, :]) & (segments[:, None] != 0)  # [Q, Q]
    allowed[:, cached:] |= same
    return allowed


def segmented_sequences(meta: AttentionMetadata) -> list[int]:
    """Sequences whose mask differs from causal: some non-zero segment has two or more of
    their query tokens. A one-token segment is causal already, so decode rows never are."""
    if meta.segment_ids is None:
        return []
    segments = meta.segment_ids.cpu()
    starts = meta.query_start_loc.tolist()
    out = []
    for i in range(meta.num_seqs):
        ids = segments[starts[i]:starts[i + 1]]
        if ids.numel() > 1 and bool(ids.any()):
            nonzero = ids[ids != 0]
            if nonzero.numel() > nonzero.unique().numel():  # some segment holds two tokens
                out.append(i)
    return out


def sequence_masks(meta: AttentionMetadata) -> dict[int, torch.Tensor]:
    """{sequence: allowed bool [Q_i, L_i]} for the sequences whose mask is not causal,
    on the device of meta.segment_ids."""
    starts = meta.query_start_loc.tolist()
    seq_lens = meta.seq_lens.tolist()
    return {i: sequence_mask(meta.segment_ids[starts[i]:starts[i + 1]], seq_lens[i])
            for i in segmented_sequences(meta)}


def flat_custom_mask(meta: AttentionMetadata) -> torch.Tensor | None:
    """FlashInfer's custom_mask for a step: bool [sum_i Q_i * L_i] on the host, every
    sequence's mask flattened row-major in sequence order (causal ones included); None
    when every sequence is causal (the causal kernels run)."""
    masks = sequence_masks(meta)
    if not masks:
        return None
    starts = meta.query_start_loc.tolist()
    seq_lens = meta.seq_lens.tolist()
    parts = []
    for i in range(meta.num_seqs):
        mask = masks[i].cpu() if i in masks else sequence_mask(
            torch.zeros(starts[i + 1] - starts[i], dtype=torch.int32), seq_lens[i])  # causal
        parts.append(mask.flatten())
    return torch.cat(parts)
