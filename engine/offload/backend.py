"""OffloadBackend: consumes a plan and a host backing, owns slots, hooks and mappings.

    backend = OffloadBackend.enable(model, config, host_plan=None, group=None, device=None)
    ...  # model(...) streams its blocks
    backend.disable()   # before the process group is destroyed

enable(): discover the plan, take the host backing (the loader's HostWeightPlan, or
pack the ordinary tensors), move the resident rest to the device (CUDA), optionally
register the cache mapping, choose the transfer (AllGather only for a group larger
than one), free what the loader held, install the hooks and prime block 0.
disable(): synchronize, remove hooks, optionally restore the streamed parameters as
ordinary tensors (restore=True), unregister, close mappings, stop the copy thread.
"""
from __future__ import annotations

import ctypes
import gc
import logging

import torch
from torch import nn

from engine.offload.config import OffloadConfig
from engine.offload.slot_device import make_device
from engine.offload.host import HostWeightPlan, host_weights
from engine.offload.plan import OffloadPlan, build_plan
from engine.offload.registration import HostRegistration
from engine.offload.streamer import BlockStreamer, StreamStats, block_views
from engine.offload.transfer import RankLocalTransfer

log = logging.getLogger("engine.offload")


def _group_size(group) -> int:
    import torch.distributed as dist

    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def uses_allgather(plan: OffloadPlan, config: OffloadConfig, group=None) -> bool:
    """AllGather needs a group larger than one whose ranks agree on the plan (checked
    here, before anything is changed); a group of one stays rank-local, no collective."""
    if not config.use_allgather:
        return False
    if _group_size(group) == 1:
        log.info("offload: AllGather group of one: rank-local transfer, no collective")
        return False
    from engine.offload.allgather import check_plan_agreement

    check_plan_agreement(plan, group)
    return True


def make_transfer(plan: OffloadPlan, source, device, config: OffloadConfig, allgather: bool, group=None):
    if allgather:
        from engine.offload.allgather import AllGatherTransfer

        return AllGatherTransfer(plan, source, device, group)
    return RankLocalTransfer(plan, source, device, config.transfer_chunk_bytes)


def release_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class OffloadBackend:
    def __init__(self, model: nn.Module, plan: OffloadPlan, device, transfer, host_kind: str,
                 registration: HostRegistration | None = None) -> None:
        self.model, self.plan, self.device, self.transfer = model, plan, device, transfer
        self.host_kind = host_kind  # "tensors" | "checkpoint_mmap" | "host_weight_cache"
        self.registration = registration
        self.host_note = ""  # how the host plan was obtained: "preflight", "published", "joined"
        self.streamer = BlockStreamer(model, plan, device, transfer)
        self.enabled = False

    @classmethod
    def enable(cls, model: nn.Module, config: OffloadConfig, host_plan: HostWeightPlan | None = None,
               group=None, device: torch.device | str | None = None) -> "OffloadBackend":
        plan = build_plan(model, config.resident_layers)
        allgather = uses_allgather(plan, config, group)
        dev = make_device(device or next(model.parameters()).device)
        source = host_weights(model, plan, dev, host_plan)  # from here on the streamed parameters are placeholders
        registration = None
        if not dev.is_host:
            model.to(dev.device)  # the resident rest
            registration = _register(source, config, host_plan)
        transfer = make_transfer(plan, source, dev, config, allgather, group)
        release_memory()
        backend = cls(model, plan, dev, transfer, host_plan.kind if host_plan else "tensors", registration)
        backend.host_note = host_plan.note if host_plan else ""
        backend.streamer.install()
        backend.enabled = True
        log.info("offload: %s streams %d blocks (%d resident) through 2 slots of %d bytes; host backing %s, "
                 "transfer %s", type(model).__name__, len(plan.blocks), len(plan.resident_blocks), plan.slot_bytes,
                 backend.host_kind, transfer.kind)
        return backend

    def disable(self, restore: bool = False) -> None:
        if not self.enabled:
            return
        self.streamer.remove()
        if restore:
            self._restore()
        if self.registration is not None:
            self.registration.unregister()
        self.transfer.close()
        self.device.close()
        self.enabled = False

    def _restore(self) -> None:
        """Every streamed parameter becomes a view of its own block buffer on the device."""
        for i, block in enumerate(self.plan.blocks):
            buffer = self.device.alloc(self.transfer.slot_bytes)
            self.transfer.fill(i, i % 2, buffer)
            for param, view in zip(self.streamer.params[i], block_views(buffer, block)):
                param.data = view
        self.device.synchronize()

    def slot_tensors(self) -> list[torch.Tensor]:
        return [s.buffer for s in self.streamer.slots]

    def host_tensors(self) -> list[torch.Tensor]:
        return self.transfer.host_tensors()

    @property
    def stats(self):
        return self.streamer.stats

    def reset_stats(self) -> None:
        self.streamer.stats = StreamStats()

    def check_integrity(self) -> None:
        self.streamer.check_integrity()
        if self.registration is not None:
            self.registration.check_integrity()


def _register(source, config: OffloadConfig, host_plan: HostWeightPlan | None) -> HostRegistration | None:
    """CUDA: page-lock the complete host weight cache mapping within the budget."""
    if not config.registration_budget_bytes or host_plan is None or host_plan.kind != "host_weight_cache":
        return None
    registration = HostRegistration(source.tensors(), config.registration_budget_bytes)
    if registration.register():
        source.is_pinned = True
        return registration
    return None
