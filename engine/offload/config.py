"""OffloadConfig: the offload policy of one service process (docs/offload.md).

Three independent decisions (seeds/distributed-layerwise-offload.md):
  policy     enabled, resident_layers (leading streamed blocks kept resident);
  backing    host_backing: "tensors" (the ordinary loader's tensors, pinned on CUDA),
             "mmap" (checkpoint safetensors mappings, after a preflight) or "cache"
             (the content-addressed host weight cache under host_cache_root);
  transfer   use_allgather: rank-local copies, or shards + AllGather over a group of
             replicas that step in lockstep.

The seed's compatibility matrix, restricted to the options starmesh has; each rejection
names both options:
  resident_layers > 0            with use_allgather        rejected
  host_backing "cache"           with use_allgather        rejected (the cache is rank-local only)
  registration_budget_bytes > 0  without host_backing "cache"  rejected
  use_allgather                  on a KV-cache engine      rejected by check_engine_kind
                                                            (its replicas never step in lockstep)
Rows that do not apply (no such option in starmesh): HSDP, TP > 1, SP, online
quantisation, other CPU offload modes. See docs/offload.md.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from core.errors import InvalidArgument

HOST_BACKINGS = ("tensors", "mmap", "cache")
ENGINE_KINDS = ("kv_cache", "stateless")


@dataclass(frozen=True)
class OffloadConfig:
    enabled: bool = False
    resident_layers: int = 0               # leading streamed blocks that stay resident
    use_allgather: bool = False            # shard blocks across a lockstep group and AllGather them
    host_backing: str = "tensors"          # "tensors" | "mmap" | "cache"
    host_cache_root: str = ""              # directory of the host weight cache ("cache" backing)
    host_cache_lock_timeout_s: float = 60.0  # bounded wait for another process's publication
    registration_budget_bytes: int = 0     # CUDA: register the whole cache mapping if it fits
    transfer_chunk_bytes: int = 0          # copy a block in chunks of this size; 0: one copy

    def __post_init__(self) -> None:
        _check_types(self)
        if self.resident_layers < 0:
            raise InvalidArgument(f"offload.resident_layers must be >= 0, got {self.resident_layers}")
        if self.host_backing not in HOST_BACKINGS:
            raise InvalidArgument(f"offload.host_backing must be one of {HOST_BACKINGS}, got {self.host_backing!r}")
        if not self.host_cache_lock_timeout_s > 0:
            raise InvalidArgument(f"offload.host_cache_lock_timeout_s must be > 0, "
                                  f"got {self.host_cache_lock_timeout_s}")
        for name in ("registration_budget_bytes", "transfer_chunk_bytes"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"offload.{name} must be >= 0, got {getattr(self, name)}")
        self._check_matrix()

    def _check_matrix(self) -> None:
        if self.use_allgather and self.resident_layers:
            raise InvalidArgument(f"offload.resident_layers ({self.resident_layers}) cannot be combined with "
                                  "offload.use_allgather: every rank must stream every block")
        if self.use_allgather and self.host_backing == "cache":
            raise InvalidArgument("offload.host_backing 'cache' (host weight cache) cannot be combined with "
                                  "offload.use_allgather: the cache backs rank-local transfer only")
        if self.registration_budget_bytes and self.host_backing != "cache":
            raise InvalidArgument(f"offload.registration_budget_bytes ({self.registration_budget_bytes}) needs "
                                  f"offload.host_backing 'cache' (a host weight cache), got "
                                  f"{self.host_backing!r}")
        if self.host_backing == "cache" and not self.host_cache_root:
            raise InvalidArgument("offload.host_backing 'cache' needs offload.host_cache_root")
        if self.host_cache_root and self.host_backing != "cache":
            raise InvalidArgument(f"offload.host_cache_root is set but offload.host_backing is "
                                  f"{self.host_backing!r}, not 'cache'")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "OffloadConfig":
        """From a deployment's `offload:` mapping (or `--offload KEY=VALUE` pairs); unknown
        keys are errors naming them."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"offload: unknown option(s) {unknown}; known: {sorted(known)}")
        if isinstance(data.get("host_cache_lock_timeout_s"), int):
            data["host_cache_lock_timeout_s"] = float(data["host_cache_lock_timeout_s"])
        return cls(**data)


def _check_types(config: OffloadConfig) -> None:
    """bool fields are bools, ints are ints (not bools), floats are numbers, strs are strs."""
    for f in fields(config):
        value = getattr(config, f.name)
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        ok = {"bool": isinstance(value, bool),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "str": isinstance(value, str)}[kind]
        if not ok:
            raise InvalidArgument(f"offload.{f.name} must be a {kind}, got {value!r}")


def check_engine_kind(config: OffloadConfig, engine_kind: str) -> None:
    """Rejects AllGather for a KV-cache engine: its replicas schedule requests
    independently, so the collectives of two ranks would never pair up."""
    if engine_kind not in ENGINE_KINDS:
        raise ValueError(f"engine_kind must be one of {ENGINE_KINDS}, got {engine_kind!r}")
    if config.enabled and config.use_allgather and engine_kind == "kv_cache":
        raise InvalidArgument("offload.use_allgather cannot be used by a KV-cache engine (engine kind "
                              "'kv_cache'): its replicas never step in lockstep")
