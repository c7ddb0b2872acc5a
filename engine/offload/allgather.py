"""AllGather transfer: each rank of a lockstep group keeps 1/world of every block.

Block i's flat bytes [nbytes] are cut into `world` shards of shard_bytes(nbytes, world)
(= ceil(nbytes / world) rounded up to SHARD_ALIGN); rank r keeps bytes
[r * shard, (r + 1) * shard), zero-padded past nbytes. A fill gathers the shards of
block i into the slot's first world * shard bytes, on the copy (communication) thread.
Every rank submits the same fills in the same order (the streamer's order is the
forward's block order, and the copy thread is FIFO), so the collectives pair up: the
group must step in lockstep (the CFG-parallel dit replicas, never a KV-cache engine).

The backend proves the ranks agree on the plan (check_plan_agreement, digests) before
it changes the model. A group of one is not an AllGather: backend.uses_allgather keeps
it rank-local.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from engine.offload.plan import OffloadPlan
from core.errors import InvalidArgument

SHARD_ALIGN = 64


def shard_bytes(nbytes: int, world: int) -> int:
    per_rank = -(-nbytes // world)
    return -(-per_rank // SHARD_ALIGN) * SHARD_ALIGN


def check_plan_agreement(plan: OffloadPlan, group) -> None:
    """Every rank of the group must hold the same plan digest."""
    digests: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(digests, plan.digest, group=group)
    if len(set(digests)) != 1:
        raise InvalidArgument(f"offload: ranks disagree on the offload plan (digests {digests}); "
                              "every rank of an AllGather group must load the same model")


def make_shard(full: torch.Tensor, rank: int, world: int, out: torch.Tensor) -> torch.Tensor:
    """out [shard] <- rank's shard of full [nbytes] uint8, zero-padded past nbytes."""
    size = out.numel()
    lo, hi = rank * size, min((rank + 1) * size, full.numel())
    out.zero_()
    if hi > lo:
        out[:hi - lo].copy_(full[lo:hi])
    return out


class AllGatherTransfer:
    kind = "allgather"

    def __init__(self, plan: OffloadPlan, source, device, group=None) -> None:
        self.plan, self.device, self.group = plan, device, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.shards: list[torch.Tensor] = []  # per block [shard_bytes] uint8, host (pinned on CUDA)
        for i, block in enumerate(plan.blocks):
            out = device.host_buffer(shard_bytes(block.nbytes, self.world))
            self.shards.append(make_shard(source.block_bytes(i), self.rank, self.world, out))
        source.close()  # the complete source (and any checkpoint mapping) is no longer needed
        self.slot_bytes = max(plan.slot_bytes, max(s.numel() for s in self.shards) * self.world)
        self._device_shards: list[torch.Tensor | None] = [None, None]

    def fill(self, i: int, slot_index: int, dst: torch.Tensor) -> None:  # dst [slot_bytes] uint8
        shard = self.shards[i]
        if not self.device.is_host:  # NCCL gathers device memory: stage the shard on the device
            buf = self._device_shards[slot_index]
            if buf is None:
                buf = self._device_shards[slot_index] = self.device.alloc(max(s.numel() for s in self.shards))
            shard = buf[:shard.numel()].copy_(shard, non_blocking=True)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(dst[:shard.numel() * self.world], shard, group=self.group)

    def host_tensors(self) -> list[torch.Tensor]:
        return list(self.shards)

    def close(self) -> None:
        self.shards = []
