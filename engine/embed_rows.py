"""Per-position input embeddings of a sequence fed embeddings instead of token ids.

The talker's inputs are not rows of its own embedding table: its prompt is built from
the thinker's embeddings, and each decode input sums codec embeddings with a thinker
text row. The sequence keeps every position's row so a preempted sequence can be
recomputed exactly. Invariant: row p is the input at position p.
"""
from __future__ import annotations

import torch


class EmbedRows:
    def __init__(self, rows: torch.Tensor) -> None:  # [n, hidden]
        if rows.dim() != 2 or rows.shape[0] == 0:
            raise ValueError(f"embedding rows must be [n > 0, hidden], got {tuple(rows.shape)}")
        self._buf = rows.detach().clone()  # [capacity, hidden]; the first _len rows are valid
        self._len = rows.shape[0]

    def __len__(self) -> int:
        return self._len

    @property
    def hidden_size(self) -> int:
        return self._buf.shape[1]

    def append(self, row: torch.Tensor) -> None:
        """Adds the input row of the next position ([hidden] or [1, hidden])."""
        self.extend(row.reshape(1, -1))

    def extend(self, rows: torch.Tensor) -> None:
        """Adds the rows of the next positions ([n, hidden], copied in)."""
        if rows.dim() != 2 or rows.shape[1] != self.hidden_size:
            raise ValueError(f"rows {tuple(rows.shape)} do not have width {self.hidden_size}")
        n = rows.shape[0]
        if self._len + n > self._buf.shape[0]:  # grow by doubling: amortized O(1) per row
            grown = self._buf.new_empty((max(2 * self._buf.shape[0], self._len + n), self.hidden_size))
            grown[:self._len] = self._buf[:self._len]
            self._buf = grown
        self._buf[self._len:self._len + n] = rows
        self._len += n

    def rows(self, start: int, end: int) -> torch.Tensor:  # [end - start, hidden]
        if not 0 <= start <= end <= self._len:
            raise IndexError(f"rows {start}:{end} outside 0:{self._len}")
        return self._buf[start:end]
