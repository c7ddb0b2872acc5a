"""The component a `starmesh serve` process hosts, built by its factory (the caller
resolves a registered name to it: the registry lives above the services).

Offload and dlo_group settings are process-wide (every loader in the process reads them),
so they are set before the factory loads any weights.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from engine.offload.config import OffloadConfig
    from engine.offload.group import DloGroupConfig


def build_served_component(spec: str, build: Callable[..., Any], kwargs: dict[str, Any],
                           offload: "OffloadConfig | None" = None, group: "DloGroupConfig | None" = None) -> Any:
    """The component `build(**kwargs)` returns for `spec` (a registered name or
    "module:callable", named in errors). A ValueError when `group` is given but the
    component does not step in lockstep (only a dit replica joins a dlo_group); the
    component is closed then."""
    if offload is not None:
        from engine.offload.loading import set_process_config

        set_process_config(offload)
    if group is not None:
        from engine.offload.group import set_process_group_config

        set_process_group_config(group)  # read by the dit loader (DitComponent.from_checkpoint)
    component = build(**kwargs)
    if group is not None and getattr(component, "lockstep", None) is None:
        component.close()
        raise ValueError(f"--dlo-group: component {spec!r} does not step in lockstep "
                         "(only a dit replica joins a dlo_group)")
    return component
