"""Host registration (CUDA only): page-lock the complete host weight cache mapping.

All or nothing: the page-aligned, coalesced ranges of every mapped tensor are checked
against the budget before anything is registered; a failed registration rolls back the
ranges already registered and the transfer keeps its pinned staging path. A rollback
that fails aborts (raises): unmapping a range the driver still holds would be unsafe.
check_integrity() verifies the registered set is exactly the planned ranges.
"""
from __future__ import annotations

import logging
import mmap
from typing import Iterable, Protocol

import torch

log = logging.getLogger("engine.offload")
PAGE = mmap.PAGESIZE
READ_ONLY = 0x08  # cudaHostRegisterReadOnly


class Registrar(Protocol):
    def register(self, start: int, nbytes: int) -> bool: ...
    def unregister(self, start: int) -> bool: ...


class CudaRegistrar:
    """cudaHostRegister / cudaHostUnregister through torch's cudart bindings."""

    def register(self, start: int, nbytes: int) -> bool:
        return int(torch.cuda.cudart().cudaHostRegister(start, nbytes, READ_ONLY)) == 0

    def unregister(self, start: int) -> bool:
        return int(torch.cuda.cudart().cudaHostUnregister(start)) == 0


def page_ranges(tensors: Iterable[torch.Tensor]) -> list[tuple[int, int]]:
    """[start, end) page-aligned address ranges covering the tensors, overlapping or
    adjacent ones coalesced, sorted."""
    spans = sorted(((t.data_ptr() // PAGE) * PAGE, -(-(t.data_ptr() + t.numel() * t.element_size()) // PAGE) * PAGE)
                   for t in tensors if t.numel())
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


class HostRegistration:
    def __init__(self, tensors: Iterable[torch.Tensor], budget_bytes: int, registrar: Registrar | None = None):
        self.ranges = page_ranges(tensors)
        self.budget_bytes = budget_bytes
        self.registrar = registrar or CudaRegistrar()
        self.registered: list[tuple[int, int]] = []

    @property
    def nbytes(self) -> int:
        return sum(e - s for s, e in self.ranges)

    def can_register(self) -> bool:
        """The check: the complete mapping fits the budget (nothing partial is ever registered)."""
        return 0 < self.nbytes <= self.budget_bytes

    def register(self) -> bool:
        """The act: registers every range, or none (rolled back); False keeps staging."""
        if not self.can_register():
            log.info("offload: host registration skipped: the mapping needs %d bytes, budget %d; "
                     "keeping pinned staging", self.nbytes, self.budget_bytes)
            return False
        for start, end in self.ranges:
            if not self.registrar.register(start, end - start):
                log.warning("offload: host registration of %d bytes at %#x failed; rolling back and keeping "
                            "pinned staging", end - start, start)
                self.unregister()
                return False
            self.registered.append((start, end))
        self.check_integrity()
        return True

    def unregister(self) -> None:
        while self.registered:
            start, _ = self.registered[-1]
            if not self.registrar.unregister(start):
                raise RuntimeError(f"offload: could not unregister host range at {start:#x}; aborting rather than "
                                   "unmapping memory the driver still holds")
            self.registered.pop()

    def check_integrity(self) -> None:
        assert self.registered in ([], self.ranges), "host registration is partial"
