"""The KV-cached rollout engine for the V-JEPA 2-AC predictor.

A rollout's context is prefilled once (its timesteps written to the paged KV cache,
one block per timestep); then each engine step feeds one timestep per rollout (the
previous prediction as patch tokens, plus that timestep's action and state) and
attends to the cached keys/values of every earlier timestep: O(one timestep) of
projections per step instead of the whole growing prefix. Rollouts feeding the same
number of timesteps run as one batch, whatever their lengths (a key-timestep mask pads
them). A shared prefix (engine.models.vjepa2_ac.prefix) is computed once and read by many.

Admission: a rollout starts only once every block it will ever need (its context and
horizon) fits beside what the running rollouts still need, so a started rollout always
finishes; the others wait in arrival order. One that could never fit the pool is refused
when added.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

import torch
import torch.nn.functional as F

from core.errors import InvalidArgument, ResourceExhausted
from engine.kv_pool import IntegrityError, KVPool
from engine.models.vjepa2_ac.loop import normalize
from engine.models.vjepa2_ac.predictor import ACPredictor
from engine.models.vjepa2_ac.paged_kv import PagedKV
from engine.models.vjepa2_ac.prefix import SharedPrefixes
from engine.models.vjepa2_ac.rollouts import BlockSeq, Rollout, RolloutFailed, StepOutput


@dataclass(frozen=True)
class RolloutConfig:
    """num_blocks: KV blocks (timesteps) in the pool; max_batch: rollouts per step;
    normalize_reps: every prediction is layer-normed (engine.models.vjepa2_ac.loop)
    before it is emitted and fed back."""

    num_blocks: int = 512
    max_batch: int = 64
    normalize_reps: bool = True

    def __post_init__(self) -> None:
        for name in ("num_blocks", "max_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"rollout.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.normalize_reps, bool):
            raise InvalidArgument(f"rollout.normalize_reps must be true or false, got {self.normalize_reps!r}")


@dataclass
class _Track:
    """One row of a forward: whose blocks it reads and writes, from which timestep."""

    seq: BlockSeq            # its blocks: a shared prefix's (by reference), then its own
    first_step: int          # absolute timestep of the first new token


class RolloutEngine:
    def __init__(self, predictor: ACPredictor, config: RolloutConfig = RolloutConfig()) -> None:
        cfg = predictor.config
        if cfg.use_extrinsics:
            raise InvalidArgument("predictor.use_extrinsics: rollouts with extrinsics tokens are not supported")
        self.predictor, self.config = predictor, config
        self.pool = KVPool(config.num_blocks, cfg.tokens_per_step)
        dtype, device = predictor.predictor_proj.weight.dtype, predictor.predictor_proj.weight.device
        self.kv = PagedKV(cfg.depth, config.num_blocks, cfg.tokens_per_step, cfg.num_heads, cfg.head_dim,
                          dtype, device)
        self.prefixes = SharedPrefixes(self.pool)
        self.rollouts: dict[str, Rollout] = {}

    # ---- requests ---------------------------------------------------------------------

    @torch.no_grad()
    def add_prefix(self, prefix_id: str, group: str, feats, actions, states) -> None:
        """Computes timesteps [0, P) shared by rollouts added with prefix=prefix_id:
        feats [P, HW, D], actions/states [P, A]. The caller holds one reference
        (release_prefix); the blocks are freed once no rollout reads them either."""
        committed = sum(self._blocks_to_go(r) for r in self.rollouts.values() if r.is_admitted)
        if feats.shape[0] > self.pool.num_free_blocks - committed:
            raise ResourceExhausted(f"prefix {prefix_id!r} needs {feats.shape[0]} KV blocks, "
                                    f"{self.pool.num_free_blocks - committed} are free")
        prefix = self.prefixes.add(prefix_id, group, feats.shape[0])
        try:
            self._forward([_Track(prefix.seq, 0)], feats[None], actions[None], states[None])
        except BaseException:
            self.prefixes.release(prefix_id)
            raise

    def release_prefix(self, prefix_id: str) -> None:
        self.prefixes.release(prefix_id)

    def add(self, rollout: Rollout) -> None:
        if rollout.rollout_id in self.rollouts:
            raise InvalidArgument(f"rollout {rollout.rollout_id!r} is already running")
        num_prefix = self.prefixes.prefixes[rollout.prefix].num_steps if rollout.prefix is not None else 0
        need = rollout.num_context - num_prefix + rollout.horizon - 1
        if need > self.pool.total:
            raise ResourceExhausted(f"rollout {rollout.rollout_id!r} needs {need} KV blocks (one per timestep), "
                                    f"the pool has {self.pool.total}")
        if rollout.prefix is not None:
            rollout.num_prefix_steps = self.prefixes.read(rollout.prefix, rollout.seq)
        self.rollouts[rollout.rollout_id] = rollout

    def abort(self, group: str) -> None:
        """Drops every rollout and prefix of `group` (a request); their blocks return."""
        for rid in [r for r, ro in self.rollouts.items() if ro.group == group]:
            self._finish(self.rollouts[rid])
        self.prefixes.drop_group(group)

    def park(self, rollout_id: str) -> None:
        self.rollouts[rollout_id].is_parked = True

    def unpark(self, rollout_id: str) -> None:
        self.rollouts[rollout_id].is_parked = False

    def has_work(self) -> bool:
        """True while a step would advance a rollout (a waiting one is admitted by a step
        once blocks free up, which only a running one can do)."""
        return any(not r.is_parked for r in self.rollouts.values())

    # ---- stepping ---------------------------------------------------------------------

    def _blocks_to_go(self, r: Rollout) -> int:
        return r.num_context + r.horizon - 1 - len(r.seq.block_table)

    def _admit(self) -> None:
        """Starts waiting rollouts, oldest first, while their blocks fit."""
        room = self.pool.num_free_blocks - sum(self._blocks_to_go(r) for r in self.rollouts.values()
                                               if r.is_admitted)
        for r in self.rollouts.values():
            if not r.is_admitted:
                if self._blocks_to_go(r) > room:
                    return
                r.is_admitted = True
                room -= self._blocks_to_go(r)

    @torch.no_grad()
    def step(self) -> list[StepOutput | RolloutFailed]:
        """One forward per group of rollouts feeding the same number of timesteps."""
        self._admit()
        ready = [r for r in self.rollouts.values() if r.is_admitted and not r.is_parked][: self.config.max_batch]
        outputs: list[StepOutput | RolloutFailed] = []
        for _, group in groupby(sorted(ready, key=self._num_new), key=self._num_new):
            rows = list(group)
            try:
                outputs += self._advance(rows)
            except ResourceExhausted as e:  # these rollouts fail; the others go on
                for r in rows:
                    self._finish(r)
                outputs += [RolloutFailed(r.rollout_id, r.group, e) for r in rows]
        return outputs

    def _num_new(self, r: Rollout) -> int:
        return r.num_context - r.num_prefix_steps if r.num_emitted == 0 else 1

    def _inputs(self, r: Rollout):
        """feats [n, HW, D], actions/states [n, A] of the timesteps r feeds now."""
        if r.num_emitted == 0:
            sl = slice(r.num_prefix_steps, r.num_context)
            return r.feats[sl], r.actions[sl], r.states[sl]
        t = r.num_context + r.num_emitted - 1
        return r.last_prediction[None], r.actions[t:t + 1], r.states[t:t + 1]

    def _advance(self, rows: list[Rollout]) -> list[StepOutput]:
        feats, actions, states = (torch.stack(parts) for parts in zip(*(self._inputs(r) for r in rows)))
        tracks = [_Track(r.seq, r.seq.num_cached_tokens // self.pool.block_size) for r in rows]
        out = self._forward(tracks, feats, actions, states)          # [B, n, S, D]
        preds = self.predictor.head(out[:, -1:])[:, 0]                # [B, HW, embed_dim]
        if self.config.normalize_reps:
            preds = normalize(preds)  # what is emitted is what the next step reads
        outputs = []
        for r, pred in zip(rows, preds):
            outputs.append(StepOutput(r.rollout_id, r.group, r.num_emitted, pred, r.num_emitted + 1 == r.horizon))
            r.num_emitted += 1
            r.last_prediction = pred
            if r.num_emitted == r.horizon:
                self._finish(r)
        return outputs

    def _forward(self, tracks: list[_Track], feats, actions, states) -> torch.Tensor:
        """Writes n new timesteps per track; returns their output tokens [B, n, S, D]."""
        p, s = self.predictor, self.pool.block_size
        b, n = feats.shape[:2]
        feats, actions, states = (x.to(self.kv.k.device, self.kv.k.dtype) for x in (feats, actions, states))
        need = sum(self.pool.blocks_needed(t.seq, n * s) for t in tracks)
        if need > self.pool.num_free_blocks:
            raise ResourceExhausted(f"KV pool has {self.pool.num_free_blocks} free blocks, a step of "
                                    f"{len(tracks)} rollouts needs {need}")
        for track in tracks:
            self.pool.allocate(track.seq, n * s)
            track.seq.num_cached_tokens += n * s
        device = self.kv.k.device
        new_blocks = torch.tensor([t.seq.block_table[-n:] for t in tracks], device=device)   # [B, n]
        tables, mask = self._tables(tracks, n, device)
        first = torch.tensor([t.first_step for t in tracks], device=device)
        x = p.embed(feats, actions, states).flatten(1, 2)                                     # [B, n*S, D]
        cos, sin = p.rope(first, n, x.dtype)

        def attend(layer, q, k, v):
            self.kv.write(layer, new_blocks, k, v)
            keys, values = self.kv.gather(layer, tables)                                      # [B, h, L, hd]
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)

        return p.layers(x, cos, sin, attend).view(b, n, s, -1)

    def _tables(self, tracks: list[_Track], n: int, device):
        """Block tables [B, nb] (prefix blocks, then own) padded with block 0, and the
        attention mask [B, 1, n*S, nb*S] (None when no row is padded and n == 1)."""
        rows = [t.seq.block_table for t in tracks]
        nb = max(map(len, rows))
        tables = torch.tensor([r + [0] * (nb - len(r)) for r in rows], device=device)
        if n == 1 and all(len(r) == nb for r in rows):
            return tables, None  # one new timestep attending to everything: no mask needed
        s = self.pool.block_size
        key_step = torch.arange(nb * s, device=device) // s                                  # [L]
        first = torch.tensor([len(r) - n for r in rows], device=device)
        query_step = first[:, None] + torch.arange(n * s, device=device) // s                # [B, n*S]
        return tables, (key_step[None, None, :] <= query_step[:, :, None])[:, None]

    def _finish(self, r: Rollout) -> None:
        self.pool.free(r.seq)  # its references on a shared prefix's blocks go with its own
        self.rollouts.pop(r.rollout_id, None)

    # ---- accounting -------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Every block's refcount equals the rollouts' and prefixes' references to it."""
        self.pool.check_integrity([r.seq.block_table for r in self.rollouts.values()] + self.prefixes.holders())
        for r in self.rollouts.values():
            prefix = self.prefixes.prefixes.get(r.prefix) if r.prefix is not None else None
            if prefix is not None and r.seq.block_table[:prefix.num_steps] != prefix.seq.block_table:
                raise IntegrityError(f"rollout {r.rollout_id!r} does not start with prefix {r.prefix!r}'s blocks")

    @staticmethod
    def blocks_fitting(predictor: ACPredictor, num_bytes: int) -> int:
        """How many KV blocks (timesteps) of `predictor` fit in num_bytes."""
        cfg = predictor.config
        per_block = 2 * cfg.depth * cfg.tokens_per_step * cfg.predictor_embed_dim
        return max(1, num_bytes // (per_block * predictor.predictor_proj.weight.element_size()))

    def load(self) -> dict:
        return {"kv_blocks_used": self.pool.num_used_blocks, "kv_blocks_total": self.pool.total,
                "rollouts_running": sum(r.is_admitted and not r.is_parked for r in self.rollouts.values()),
                "rollouts_waiting": sum(not r.is_admitted for r in self.rollouts.values()),
                "rollouts_parked": sum(r.is_parked for r in self.rollouts.values())}
