"""Rank-local transfer: a complete block from this process's host source into a slot.

Runs on the copy thread. Sources the device can read directly (CPU working memory,
pinned or registered host memory on CUDA) are copied straight into the slot; pageable
mappings on CUDA are first packed into the slot's pinned staging buffer.
"""
from __future__ import annotations

import torch

from engine.offload.host import copy_bytes
from engine.offload.plan import OffloadPlan


class RankLocalTransfer:
    kind = "rank_local"

    def __init__(self, plan: OffloadPlan, source, device, chunk_bytes: int = 0) -> None:
        self.plan, self.source, self.device, self.chunk_bytes = plan, source, device, chunk_bytes
        self.slot_bytes = plan.slot_bytes

    def fill(self, i: int, slot_index: int, dst: torch.Tensor) -> None:  # dst [slot_bytes] uint8
        if self.device.is_host or self.source.is_pinned:
            self.source.copy_block(i, dst, self.chunk_bytes, non_blocking=not self.device.is_host)
            return
        nbytes = self.plan.blocks[i].nbytes
        staging = self.device.staging(slot_index, self.plan.slot_bytes)
        self.source.copy_block(i, staging, self.chunk_bytes)
        copy_bytes(dst, staging[:nbytes], self.chunk_bytes, non_blocking=True)

    def host_tensors(self) -> list[torch.Tensor]:
        return self.source.tensors()

    def close(self) -> None:
        self.source.close()
