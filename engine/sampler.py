"""Next-token choice, per request and independent of the batch.

Every row is processed with its own request's parameters only, and a seeded request
draws from a generator seeded by (seed, number of tokens it has produced): the same
seed gives the same tokens whatever else is in the batch, whichever step the request
joined, and after a preemption (which recomputes but never resamples).

Processing order is transformers' (repetition penalty, then temperature, top-k,
top-p), so processed logits can be compared with its logits processors.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from engine.nucleus import top_p_filter
from engine.sequence import Sequence

_MASK64 = (1 << 64) - 1


class Sampler:
    def __init__(self, seed: int | None = None) -> None:
        # The process RNG for unseeded requests; a seed here only makes tests repeatable.
        self._rng = torch.Generator()
        if seed is None:
            self._rng.seed()
        else:
            self._rng.manual_seed(seed & _MASK64)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        """logits [N, V], one row per sequence (its last token's next-token logits)."""
        if logits.dim() != 2 or logits.shape[0] != len(seqs):
            raise ValueError(f"logits {tuple(logits.shape)} for {len(seqs)} sequences")
        logits = logits.float()
        out = [0] * len(seqs)
        # Greedy rows (the common case, the talker's with penalties too) share one argmax
        # and one device sync; only sampled rows go one by one.
        plain = [i for i, s in enumerate(seqs) if s.params.greedy and not s.params.needs_logit_processing]
        penalized = [i for i, s in enumerate(seqs) if s.params.greedy and s.params.needs_logit_processing]
        if plain:
            _argmax_into(out, plain, logits[plain])
        if penalized:
            _argmax_into(out, penalized, processed_greedy(logits[penalized], [seqs[i] for i in penalized]))
        for i, seq in enumerate(seqs):
            if not seq.params.greedy:
                out[i] = self._sample_row(logits[i], seq)
        return out

    def draw(self, logits: torch.Tensor, seed: int | None, draw_index: int) -> int:
        """One id drawn from softmax(logits) ([V], already processed): a seeded request's
        draw number draw_index comes from its own generator, an unseeded one's from the
        process RNG. The talker's code predictor draws its extra code groups through this too.

        The draw is torch.multinomial over the ids of nonzero probability, in id order: the
        distribution of a draw over the whole row, at the cost of the nucleus (torch draws one
        exponential per entry it is given) instead of the vocabulary."""
        probs = torch.softmax(logits, dim=-1).cpu()
        support = torch.from_numpy(np.flatnonzero(probs.numpy() > 0))  # [K] ascending ids (numpy: cheaper)
        gen = self._rng if seed is None else seeded_generator(seed, draw_index)
        return int(support[torch.multinomial(probs[support], 1, generator=gen)])

    def _sample_row(self, row: torch.Tensor, seq: Sequence) -> int:
        return self.draw(processed_logits(row, seq), seq.params.seed, seq.num_output_tokens)


def _argmax_into(out: list[int], rows: list[int], values: torch.Tensor) -> None:
    """out[rows[k]] = argmax of values[k] ([len(rows), V]), with one device sync."""
    for i, t in zip(rows, values.argmax(dim=-1).tolist()):
        out[i] = t


def processed_logits(row: torch.Tensor, seq: Sequence) -> torch.Tensor:
    """The logits a row is sampled from: penalties, and for sampled requests temperature,
    top-k and top-p (greedy takes the argmax of the penalized logits, as HF does).

    The row is copied once: dividing by the temperature first and then writing the penalized
    entries divided by it gives transformers' penalty-then-temperature values bit for bit
    (each division is correctly rounded on its own)."""
    p = seq.params
    temperature = 1.0 if p.greedy else p.temperature
    out = row / temperature if temperature != 1.0 else row.clone()
    if p.repetition_penalty != 1.0:
        idx = seq.ids_tensor(with_prompt=p.penalize_prompt).to(row.device)
        if len(idx):
            out[idx] = repetition_penalty_values(row[idx], p.repetition_penalty) / temperature
    ids, more = _suppressed(seq)
    if ids or more:
        out.index_fill_(0, _id_index(ids, more, row.device), float("-inf"))
    if p.greedy:
        return out
    return top_p_filter(top_k_filter(out, p.top_k), p.top_p)


def processed_greedy(rows: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """processed_logits of greedy rows [R, V], all at once and equal to it bit for bit (the
    same elementwise operations on the same values): each row's penalty over its own seen
    ids in one scatter, then -inf over each suppressed-id set for all rows that share it. A
    talker batch shares one set, so its ~1000 suppressed ids cost one write, not one a row."""
    out = rows.clone()
    if not seqs:
        return out
    seen = [(r, s.ids_tensor(with_prompt=s.params.penalize_prompt), s.params.repetition_penalty)
            for r, s in enumerate(seqs) if s.params.repetition_penalty != 1.0]
    seen = [(r, ids, penalty) for r, ids, penalty in seen if len(ids)]
    if seen:
        counts = torch.tensor([len(ids) for _, ids, _ in seen])
        row_of = torch.tensor([r for r, _, _ in seen]).repeat_interleave(counts).to(rows.device)
        col = torch.cat([ids for _, ids, _ in seen]).to(rows.device)  # [n] seen ids, row by row
        penalties = [p for _, _, p in seen]
        if all(p == penalties[0] for p in penalties):  # one request kind's batch: a scalar
            penalty = penalties[0]
        else:
            penalty = torch.tensor(penalties, dtype=rows.dtype).repeat_interleave(counts).to(rows.device)
        out[row_of, col] = repetition_penalty_values(rows[row_of, col], penalty)
    # Grouped by the sets' identity: equal id sets are one object (sampling_params.shared_ids),
    # and hashing a ~1000-id tuple per row per step cost more than the write. Rows with equal
    # but distinct tuples would only form more groups; each group writes its own ids.
    groups: dict[tuple[int, int], tuple[tuple, list[int]]] = {}
    for r, s in enumerate(seqs):
        key = _suppressed(s)
        if key[0] or key[1]:
            groups.setdefault((id(key[0]), id(key[1])), (key, []))[1].append(r)
    for (ids, more), members in groups.values():
        index = _id_index(ids, more, rows.device)
        out[torch.tensor(members, device=rows.device)[:, None], index[None, :]] = float("-inf")
    return out


def _suppressed(seq: Sequence) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids a row's logits are -inf at: its suppressed ids, and its EOS ids while it has
    fewer than min_new_tokens outputs."""
    p = seq.params
    return p.suppress_token_ids, p.eos_token_ids if seq.num_output_tokens < p.min_new_tokens else ()


@functools.lru_cache(maxsize=64)
def _id_index(ids: tuple[int, ...], more: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """ids + more as an index tensor on `device`, made once: a talker suppresses every
    non-codec id (~1000) of every row at every step, and indexing by a list of that many
    ids converts it each time (~240 us a row, against ~8 for index_fill_ with this)."""
    return torch.tensor(ids + more, dtype=torch.long, device=device)


def repetition_penalty(row: torch.Tensor, token_ids: list[int], penalty: float) -> torch.Tensor:
    """HF semantics: seen ids' logits are divided by the penalty if > 0, else multiplied."""
    idx = torch.tensor(token_ids, dtype=torch.long, device=row.device)
    return row.scatter(0, idx, repetition_penalty_values(row.gather(0, idx), penalty))


def repetition_penalty_values(seen: torch.Tensor, penalty: float) -> torch.Tensor:
    return torch.where(seen < 0, seen * penalty, seen / penalty)


def top_k_filter(row: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k highest logits (and ties with the k-th); 0 means off."""
    if k <= 0 or k >= row.shape[-1]:
        return row
    kth = torch.topk(row, k).values[..., -1:]
    return row.masked_fill(row < kth, float("-inf"))


def seeded_generator(seed: int, step: int) -> torch.Generator:
    """A generator for draw number `step` of a seeded request. The seed is mixed with
    splitmix64, not Python's hash(), so it is the same in every process."""
    x = (seed * 0x9E3779B97F4A7C15 + step + 1) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return torch.Generator().manual_seed(x ^ (x >> 31))
