"""A deployment's per-service `options`, checked before any process starts, so that a bad
value fails `starmesh up` naming the key instead of a child process later.

`options.offload` is read by offload_config, as `starmesh serve` reads it (engine.offload.config,
with `enabled` implied); the other options go to the component's factory as they are.
"""
from __future__ import annotations

from typing import Mapping

from core.errors import InvalidArgument
from engine.offload.config import OffloadConfig

# Components whose replicas can step in lockstep (a dlo_group): stateless per step. A
# KV-cache engine's replicas schedule their requests independently and never do.
LOCKSTEP_COMPONENTS = frozenset({"dit"})


def offload_config(section: Mapping | None, overrides: Mapping | None = None) -> OffloadConfig | None:
    """A service's OffloadConfig: its `offload` option (a mapping) with `overrides` (serve's
    --offload flags) on top, enabled unless one says enabled=false; None when neither is
    given. The one reading of the option, for `starmesh serve` and for a deployment check."""
    if section is None and not overrides:
        return None
    return OffloadConfig.from_dict({"enabled": True, **(section or {}), **(overrides or {})})


def check_options(options: Mapping) -> OffloadConfig | None:
    """The service's offload config (None without an `offload` section); an
    InvalidArgument names the key as `options.offload...`."""
    section = options.get("offload")
    if section is not None and not isinstance(section, Mapping):
        raise InvalidArgument(f"options.offload must be a mapping, got {section!r}")
    try:
        return offload_config(section)
    except InvalidArgument as e:
        raise InvalidArgument(f"options.{e}") from None


def can_step_in_lockstep(component: str) -> bool:
    """May a replica of `component` be a dlo_group member?"""
    return component in LOCKSTEP_COMPONENTS
