"""One engine step's work: which sequences, and how many of their tokens each computes.

The runner turns it into model inputs (token_ids[start:start + n] at positions
start.., slots from the KV pool); the scheduler's postprocess then advances the
sequences by it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.sequence import Sequence


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_query_tokens: list[int] = field(default_factory=list)  # per seq, tokens computed this step
    # Snapshot at schedule time: postprocess moves num_cached_tokens on, and the runner
    # must still see the positions this step computes.
    start_positions: list[int] = field(init=False)
    expert_ids: list | None = None       # per seq: ints [num_query_tokens[i]]
    segment_ids: list | None = None      # per seq: ints [num_query_tokens[i]], 0 = causal
    write_kv: list[bool] | None = None   # per seq: False = attend without storing K/V

    def __post_init__(self) -> None:
        if len(self.seqs) != len(self.num_query_tokens):
            raise ValueError("one num_query_tokens entry per sequence")
        if self.has_features:
            self._check_features()
        self.start_positions = [s.num_cached_tokens for s in self.seqs]
        self._sample_mask = [c + n == s.num_tokens
                             for s, c, n in zip(self.seqs, self.start_positions, self.num_query_tokens)]

    @property
    def has_features(self) -> bool:
        return self.expert_ids is not None or self.segment_ids is not None or self.write_kv is not None

    def _check_features(self) -> None:
        for name in ("expert_ids", "segment_ids"):
            per_seq = getattr(self, name)
            if per_seq is None:
                continue
            if len(per_seq) != len(self.seqs):
                raise ValueError(f"{name}: one entry per sequence")
            for i, (ids, n) in enumerate(zip(per_seq, self.num_query_tokens)):
                if len(ids) != n:
                    raise ValueError(f"{name}[{i}] has {len(ids)} ids for {n} query tokens")
        if self.write_kv is not None and len(self.write_kv) != len(self.seqs):
            raise ValueError("write_kv: one flag per sequence")

    @property
    def num_tokens(self) -> int:
        return sum(self.num_query_tokens)

    @property
    def sample_mask(self) -> list[bool]:
        """True where this step reaches the sequence's last token (a new token is sampled)."""
        return self._sample_mask

    @property
    def seq_lens(self) -> list[int]:
        """Tokens each sequence attends to this step (cached + query)."""
        return [c + n for c, n in zip(self.start_positions, self.num_query_tokens)]
