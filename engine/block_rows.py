"""Per-position outputs kept with the KV blocks: the captured layer states and input
embeddings an engine hands out for every position (StepOutput.hidden / embeds; the
Qwen3-Omni talker reads them for every prompt position).

A position whose K/V come from the cache or a context is not computed again, yet its
rows must still be handed out: so every computed row is also copied to the host, at its
KV slot (block * block_size + offset), and a sequence's first computed step hands out
the rows of its reused positions from there. Each position's rows go out exactly once
per sequence (rows_emitted), so a sequence recomputed after preemption does not send
them twice, and the rows of a prompt are the same with the cache cold or warm.

Host buffers [num_blocks * block_size, width] per kind, made on first use (torch.empty:
pages untouched stay unallocated).
"""
from __future__ import annotations

import numpy as np
import torch

KINDS = ("hidden", "embeds")


def slots_of(seq, start: int, end: int, block_size: int) -> torch.Tensor:
    """int64 [end - start] KV slots of positions start..end - 1 of seq."""
    positions = np.arange(start, end)
    table = np.asarray(seq.block_table, dtype=np.int64)
    return torch.from_numpy(table[positions // block_size] * block_size + positions % block_size)


class BlockRows:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_slots = num_blocks * block_size
        self.block_size = block_size
        self._rows: dict[str, torch.Tensor] = {}  # kind -> [num_slots, width]

    def _buffer(self, kind: str, like: torch.Tensor) -> torch.Tensor:
        buf = self._rows.get(kind)
        if buf is None:
            buf = self._rows[kind] = torch.empty(self.num_slots, like.shape[-1], dtype=like.dtype)
        return buf

    def copy_block(self, src: int, dst: int) -> None:
        bs = self.block_size
        for buf in self._rows.values():
            buf[dst * bs:(dst + 1) * bs] = buf[src * bs:(src + 1) * bs]

    def capture(self, batch, out) -> None:
        """Stores the step's rows (out.hidden / out.embeds, per sequence [q_i, width]) and
        replaces them by the rows each sequence hands out now: from the first position it
        has not handed out to the end of this step's."""
        kinds = [k for k in KINDS if getattr(out, k) is not None]
        if not kinds:
            return
        bs = self.block_size
        for i, (seq, start, n) in enumerate(zip(batch.seqs, batch.start_positions, batch.num_query_tokens)):
            sent = seq.rows_emitted
            for kind in kinds:
                per_seq = getattr(out, kind)
                rows = per_seq[i].detach().to("cpu")
                buf = self._buffer(kind, rows)
                buf.index_copy_(0, slots_of(seq, start, start + n, bs), rows.to(buf.dtype))
                if sent < start:  # reused positions not handed out yet
                    per_seq[i] = torch.cat([buf[slots_of(seq, sent, start, bs)], rows])
                elif sent > start:  # recomputed positions already handed out
                    per_seq[i] = per_seq[i][sent - start:]
            seq.rows_emitted = max(sent, start + n)
