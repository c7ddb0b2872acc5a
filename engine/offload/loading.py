"""The loaders' side of offload: choose the host backing, then hand the model to the backend.

A loader calls, around its ordinary loading:

    offload = effective_config(offload, "kv_cache")          # None when offload is off
    model = build on "cpu" when offload is on, else on device
    mapped = prepare_host_weights(model, offload, files, sources)   # before loading
    load every parameter except skipped_names(mapped)
    model.offload_backend = attach_offload(model, offload, mapped, device)   # after loading

`sources` are (parameter, checkpoint tensor, index) triples (CausalLM.weight_sources).
The process-wide default is what `starmesh serve --offload ...` sets for the service
it hosts (one service per process), so factories need no new arguments.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import torch
from torch import nn

from engine.offload.backend import OffloadBackend
from engine.offload.checkpoint_mmap import checkpoint_mmap_plan
from engine.offload.config import OffloadConfig, check_engine_kind
from engine.offload.host import HostWeightPlan
from engine.offload.host_cache import publish_or_join
from engine.offload.plan import build_plan

_process_config: OffloadConfig | None = None


def set_process_config(config: OffloadConfig | None) -> None:
    """The offload policy of every model this process loads without an explicit one."""
    global _process_config
    _process_config = config


def process_config() -> OffloadConfig | None:
    return _process_config


def effective_config(offload: OffloadConfig | None, engine_kind: str) -> OffloadConfig | None:
    """The explicit config, else the process's; None when disabled. Checks the engine kind."""
    config = offload if offload is not None else _process_config
    if config is None or not config.enabled:
        return None
    check_engine_kind(config, engine_kind)
    return config


def prepare_host_weights(model: nn.Module, offload: OffloadConfig | None, files: dict[str, Path],
                         sources: Iterable[tuple[str, str, object]]) -> HostWeightPlan | None:
    """mmap backing: the preflight-proven checkpoint plan, whose parameters need no
    ordinary loading; otherwise None."""
    if offload is None or offload.host_backing != "mmap":
        return None
    plan = build_plan(model, offload.resident_layers)
    expected = {p.name: (p.shape, p.dtype) for b in plan.blocks for p in b.params}
    return checkpoint_mmap_plan(expected, files, sources)


def skipped_names(mapped: HostWeightPlan | None) -> frozenset[str]:
    return frozenset(mapped.bindings) if mapped is not None else frozenset()


def attach_offload(model: nn.Module, offload: OffloadConfig | None, mapped: HostWeightPlan | None = None,
                   device: torch.device | str | None = None, group=None) -> OffloadBackend | None:
    """Enables offload on a loaded model (None when offload is off). The cache backing
    publishes or joins the host weight cache here, falling back to the ordinary tensors."""
    if offload is None:
        return None
    if mapped is None and offload.host_backing == "cache":
        plan = build_plan(model, offload.resident_layers)
        params = dict(model.named_parameters())
        tensors = {name: params[name].data for name in plan.streamed_names}
        mapped = publish_or_join(offload.host_cache_root, tensors, offload.host_cache_lock_timeout_s)
    return OffloadBackend.enable(model, offload, mapped, group=group, device=device)
