"""Measuring what offload promises: weight bytes outside host backing, and shared pages.

weight_bytes counts distinct tensor storages (by data pointer) of a model's parameters
plus the backend's slots, leaving out the host backing's storages: with offload on it
is at most 2 * slot_bytes + the resident parameters, at any moment of a forward.
PSS (proportional set size) splits a shared page among the processes mapping it, so two
processes on one checkpoint mapping together account for about one copy of it.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def storages(tensors: Iterable[torch.Tensor]) -> dict[int, int]:
    """data pointer of each distinct non-empty storage -> its bytes."""
    out: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        if storage.nbytes() and t.device.type != "meta":
            out[storage.data_ptr()] = storage.nbytes()
    return out


def weight_bytes(model: nn.Module, backend=None) -> int:
    """Bytes of the parameters' storages plus the slots, host backing excluded."""
    tensors = list(model.parameters())
    host: dict[int, int] = {}
    if backend is not None:
        tensors += backend.slot_tensors()
        host = storages(backend.host_tensors())
    return sum(n for ptr, n in storages(tensors).items() if ptr not in host)


def param_bytes(model: nn.Module, exclude: frozenset[str] = frozenset()) -> int:
    """Bytes of the model's parameters whose names are not in exclude (e.g. plan.streamed_names)."""
    return sum(p.numel() * p.element_size() for name, p in model.named_parameters() if name not in exclude)


def _smaps_entries(pid: int) -> Iterable[tuple[str, dict[str, int]]]:
    """(mapped path or "", {field: kB}) per mapping of /proc/<pid>/smaps."""
    path, fields = None, {}
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                if path is not None:
                    yield path, fields
                path, fields = (head[5] if len(head) > 5 else ""), {}
            elif len(head) >= 2 and head[0].endswith(":") and head[1].isdigit():
                fields[head[0][:-1]] = int(head[1])
    if path is not None:
        yield path, fields


def mapping_kib(pid: int, paths: Iterable[str], field: str = "Pss") -> int:
    """Sum of `field` (kB) over the process's mappings of any of the files."""
    wanted = set(paths)
    return sum(fields.get(field, 0) for path, fields in _smaps_entries(pid) if path in wanted)


def process_pss_kib(pid: int, field: str = "Pss") -> int:
    """A PSS total (kB) of the process from /proc/<pid>/smaps_rollup: "Pss", or "Pss_Anon"
    (private and anonymous memory only: not moved by other processes mapping the same
    shared libraries, unlike Pss_File)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/smaps_rollup has no {field} line")
