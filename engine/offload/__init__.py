"""Distributed layerwise offload (DLO): stream a model's blocks through two slots.

    backend = OffloadBackend.enable(model, OffloadConfig(enabled=True))   # any nn.Module
    model(...)            # block N+1 is copied while block N computes
    backend.disable()

Loaders call engine.offload.loading (host backing selection); see docs/offload.md.
"""
from engine.offload.backend import OffloadBackend
from engine.offload.config import OffloadConfig, check_engine_kind
from engine.offload.host import HostWeightPlan
from engine.offload.plan import OffloadPlan, build_plan, discover_blocks
from engine.offload.streamer import StaleSlotError

__all__ = ["HostWeightPlan", "OffloadBackend", "OffloadConfig", "OffloadPlan", "StaleSlotError", "build_plan",
           "check_engine_kind", "discover_blocks"]
