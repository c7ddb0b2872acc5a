"""The hot path: one pre/post hook pair per streamed block, two slots, prefetch of the next.

Invariants (n streamed blocks, in execution order, slots A and B of plan.slot_bytes):
  - outside its forward a streamed block's parameters are placeholders (no bytes);
    inside it they are views of the slot that holds the block;
  - while block i computes from one slot, block (i + 1) % n is copied into the other
    (circular: the last block prefetches the first for the next forward);
  - a slot is refilled only after the block that used it has finished (its post hook
    ran; on CUDA its "free" event is recorded), and every fill bumps the slot's
    generation: a block whose slot changed generation while it computed fails with
    StaleSlotError instead of returning results computed from other weights;
  - a block that finds itself in neither slot (a forward that stopped early, a model
    that skips blocks) is loaded synchronously and counted as a miss.
One forward at a time: a block entered while another holds a slot is an error.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from engine.offload.slot_device import Ready
from engine.offload.plan import BlockLayout, OffloadPlan


class StaleSlotError(RuntimeError):
    """A block's slot was refilled while the block was using it."""


@dataclass
class Slot:
    index: int
    buffer: torch.Tensor            # [slot_bytes] uint8 on the device
    block: int | None = None        # the block whose bytes it holds or is being filled with
    generation: int = 0             # bumped by every fill
    ready: Ready | None = None
    counted: bool = True            # the fill's copy time is already in the stats


@dataclass(frozen=True)
class Lease:
    slot: Slot
    block: int
    generation: int


@dataclass
class StreamStats:
    fills: int = 0
    misses: int = 0                 # blocks loaded synchronously (not prefetched)
    blocks_run: int = 0
    copy_s: float = 0.0             # copy-thread time of the fills waited on
    fills_waited: int = 0
    wait_s: float = 0.0             # compute thread blocked on readiness
    compute_s: float = 0.0          # inside streamed blocks (between the hooks)
    extra: dict = field(default_factory=dict)


def block_views(buffer: torch.Tensor, block: BlockLayout) -> list[torch.Tensor]:
    """The block's parameters as views of buffer [>= block.nbytes] uint8, in plan order."""
    return [buffer[p.offset:p.offset + p.nbytes].view(p.dtype).view(p.shape) for p in block.params]


class BlockStreamer:
    def __init__(self, model: nn.Module, plan: OffloadPlan, device, transfer) -> None:
        self.plan, self.device, self.transfer = plan, device, transfer
        # Exactly two slots, sized for the largest block (AllGather: its padded shards).
        self.slots = [Slot(i, device.alloc(transfer.slot_bytes)) for i in range(2)]
        named = dict(model.named_parameters())
        self.params = [[named[p.name] for p in b.params] for b in plan.blocks]
        # Built once, outside any inference_mode: [slot][block] -> views in param order.
        self.views = [[block_views(s.buffer, b) for b in plan.blocks] for s in self.slots]
        self.placeholders = [[p.data for p in params] for params in self.params]
        self.modules = [model.get_submodule(b.path) for b in plan.blocks]
        self.stats = StreamStats()
        self._active: Lease | None = None
        self._t_enter = 0.0
        self._handles: list = []

    # -- lifecycle -----------------------------------------------------------------
    def install(self) -> None:
        for i, module in enumerate(self.modules):
            self._handles.append(module.register_forward_pre_hook(lambda m, a, i=i: self._enter(i)))
            self._handles.append(module.register_forward_hook(lambda m, a, o, i=i: self._leave(i),
                                                              always_call=True))
        self._fill(self.slots[0], 0)  # prime the first block

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.device.synchronize()

    # -- hooks ---------------------------------------------------------------------
    def _enter(self, i: int) -> None:
        if self._active is not None:
            raise RuntimeError(f"offload: block {self.plan.blocks[i].path} entered while "
                               f"{self.plan.blocks[self._active.block].path} holds a slot (one forward at a time)")
        lease = self._acquire(i)
        nxt = (i + 1) % len(self.modules)
        if nxt != i and all(s.block != nxt for s in self.slots):
            self._fill(self.slots[1 - lease.slot.index], nxt)
        for param, view in zip(self.params[i], self.views[lease.slot.index][i]):
            param.data = view
        self._active = lease
        self._t_enter = time.perf_counter()

    def _leave(self, i: int) -> None:
        lease, self._active = self._active, None
        if lease is None:  # the pre hook failed; nothing was repointed
            return
        self.stats.compute_s += time.perf_counter() - self._t_enter
        self.stats.blocks_run += 1
        for param, placeholder in zip(self.params[i], self.placeholders[i]):
            param.data = placeholder
        self.device.mark_free(lease.slot.index)
        if lease.slot.generation != lease.generation or lease.block != i:
            raise StaleSlotError(f"offload: the slot of block {self.plan.blocks[i].path} was refilled while it "
                                 f"computed (generation {lease.generation} -> {lease.slot.generation})")

    # -- slots ---------------------------------------------------------------------
    def _fill(self, slot: Slot, i: int) -> None:
        slot.generation += 1
        slot.block = i
        slot.counted = False
        slot.ready = self.device.submit(slot.index, lambda: self.transfer.fill(i, slot.index, slot.buffer))
        self.stats.fills += 1

    def _acquire(self, i: int) -> Lease:
        slot = next((s for s in self.slots if s.block == i), None)
        if slot is None:
            self.stats.misses += 1
            nxt = (i + 1) % len(self.modules)
            slot = self.slots[1] if self.slots[0].block == nxt else self.slots[0]
            self._fill(slot, i)
        t0 = time.perf_counter()
        self.device.wait(slot.ready)
        self.stats.wait_s += time.perf_counter() - t0
        if not slot.counted:
            slot.counted = True
            self.stats.copy_s += slot.ready.copy_s
            self.stats.fills_waited += 1
        return Lease(slot, i, slot.generation)

    def check_integrity(self) -> None:
        """Outside a forward: no slot is leased and every streamed parameter is a placeholder."""
        assert self._active is None, "a slot is still leased outside a forward"
        for params in self.params:
            for param in params:
                assert param.numel() == 0, "a streamed parameter holds bytes outside its block's forward"
