"""Host backing: where the streamed blocks' bytes live between uses.

HostWeightPlan is the one-way loader -> backend contract for the mapped backings
("checkpoint_mmap", "host_weight_cache"): one host tensor per streamed parameter, same
name, shape and dtype, views of read-only file mappings whose pages processes share.
Without a plan the backend packs the ordinary loader's tensors (PackedHostWeights).

Both sources fill a slot with `copy_block(i, dst)`: dst [>= block nbytes] uint8 gets
the block's parameters at their plan offsets.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from engine.offload.plan import OffloadPlan


def byte_view(t: torch.Tensor) -> torch.Tensor:  # any contiguous tensor -> [nbytes] uint8, same storage
    return t.reshape(-1).view(torch.uint8)


def placeholder(param: torch.Tensor) -> None:
    """Points param at an empty tensor of its dtype and device: no bytes, and any use
    outside its block's hooks fails on the shape."""
    param.data = torch.empty(0, dtype=param.dtype, device=param.device)


def copy_bytes(dst: torch.Tensor, src: torch.Tensor, chunk_bytes: int = 0, non_blocking: bool = False) -> None:
    """dst[:n] <- src[:n] (both [n] uint8), in chunks of chunk_bytes when > 0."""
    n = src.numel()
    step = chunk_bytes or n or 1
    for start in range(0, n, step):
        end = min(start + step, n)
        dst[start:end].copy_(src[start:end], non_blocking=non_blocking)


@dataclass
class HostWeightPlan:
    kind: str                                   # "checkpoint_mmap" | "host_weight_cache"
    bindings: dict[str, torch.Tensor]           # parameter name -> mapped host tensor
    files: tuple[str, ...] = ()                 # the mapped files (for PSS accounting, logs)
    note: str = ""                              # how it was obtained (published / joined / preflight)
    closed: bool = field(default=False, init=False)

    def close(self) -> None:
        """Drops the views; a file mapping goes away with its last view."""
        self.bindings = {}
        self.closed = True


class PackedHostWeights:
    """Ordinary tensors repacked as one flat host buffer per block (pinned on CUDA)."""

    is_pinned: bool

    def __init__(self, model: nn.Module, plan: OffloadPlan, device) -> None:
        params = dict(model.named_parameters())
        self.blocks: list[torch.Tensor] = []   # per block [nbytes] uint8
        for block in plan.blocks:
            flat = device.host_buffer(block.nbytes)
            for p in block.params:
                flat[p.offset:p.offset + p.nbytes].copy_(byte_view(params[p.name].data.contiguous()))
                placeholder(params[p.name])  # free the loader's copy as we go
            self.blocks.append(flat)
        self.is_pinned = not device.is_host

    def copy_block(self, i: int, dst: torch.Tensor, chunk_bytes: int = 0, non_blocking: bool = False) -> None:
        copy_bytes(dst, self.blocks[i], chunk_bytes, non_blocking)

    def block_bytes(self, i: int) -> torch.Tensor:
        return self.blocks[i]

    def tensors(self) -> list[torch.Tensor]:
        return list(self.blocks)

    def close(self) -> None:
        self.blocks = []


class MappedHostWeights:
    """A HostWeightPlan's mapped views, packed per parameter into the destination."""

    is_pinned = False

    def __init__(self, plan: OffloadPlan, host_plan: HostWeightPlan) -> None:
        self.host_plan = host_plan
        self.blocks: list[list[tuple[int, torch.Tensor]]] = []  # per block: (offset, [nbytes] uint8 view)
        for block in plan.blocks:
            entries = []
            for p in block.params:
                t = host_plan.bindings.get(p.name)
                if t is None or tuple(t.shape) != p.shape or t.dtype != p.dtype or not t.is_contiguous():
                    raise ValueError(f"{host_plan.kind} binding of {p.name!r} is missing or does not match "
                                     f"{p.shape} {p.dtype}")
                entries.append((p.offset, byte_view(t)))
            self.blocks.append(entries)

    def copy_block(self, i: int, dst: torch.Tensor, chunk_bytes: int = 0, non_blocking: bool = False) -> None:
        for offset, src in self.blocks[i]:
            copy_bytes(dst[offset:offset + src.numel()], src, chunk_bytes, non_blocking)

    def block_bytes(self, i: int) -> torch.Tensor:
        """The block packed into a fresh [nbytes] buffer (used to prepare AllGather shards)."""
        end = max(off + src.numel() for off, src in self.blocks[i])
        out = torch.zeros(end, dtype=torch.uint8)
        self.copy_block(i, out)
        return out

    def tensors(self) -> list[torch.Tensor]:
        return [src for entries in self.blocks for _, src in entries]

    def close(self) -> None:
        self.blocks = []
        self.host_plan.close()


def host_weights(model: nn.Module, plan: OffloadPlan, device, host_plan: HostWeightPlan | None):
    """The host source of every streamed block. With a mapped plan the loader never
    materialized the streamed parameters (they become placeholders here)."""
    if host_plan is None:
        return PackedHostWeights(model, plan, device)
    source = MappedHostWeights(plan, host_plan)
    params = dict(model.named_parameters())
    for block in plan.blocks:
        for p in block.params:
            placeholder(params[p.name])
    return source
