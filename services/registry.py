"""Component factories by name, for `starmesh serve <component>`.

A registered name maps to a "module:callable" path, imported only when served
(so the CLI starts without importing every model). Anything that is not a
registered name is taken as a "module:callable" path itself, e.g.
`starmesh serve bench.echo_components:make_echo`. Later issues register
their components here (thinker, talker, code2wav, dit, vae).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

_FACTORIES: dict[str, str] = {
    "thinker": "services.thinker.component:ThinkerComponent.from_checkpoint",
    "talker": "services.talker.component:TalkerComponent.from_checkpoint",
    "talker+codec": "services.talker.colocated:make_talker_codec",
    "dit": "services.dit.denoiser:DitComponent.from_checkpoint",
    "vae": "services.dit.vae:VaeComponent.from_checkpoint",
    "text_encoder": "services.dit.text:TextEncoderComponent.from_checkpoint",
    "sd3": "services.dit.colocated:make_sd3",
    "codec": "services.codec.factory:codec_from_checkpoint",
    "encoder": "services.encoder.component:encoders_from_checkpoint",
    "orpheus_lm": "services.orpheus.component:make_orpheus_lm",
    "world": "services.world.component:WorldComponent.from_checkpoint",
}


def register(name: str, factory_path: str) -> None:
    """Registers `name` -> "module:callable" (a callable returning a component)."""
    if ":" not in factory_path:
        raise ValueError(f"factory path must look like 'module:callable', got {factory_path!r}")
    _FACTORIES[name] = factory_path


def names() -> list[str]:
    return sorted(_FACTORIES)


def resolve_factory(spec: str) -> Callable[..., Any]:
    """The factory for a registered name or a "module:callable" path."""
    path = _FACTORIES.get(spec, spec)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        known = ", ".join(names()) or "none registered yet"
        raise ValueError(f"unknown component {spec!r}: not a registered name ({known}) nor 'module:callable'")
    module = importlib.import_module(module_name)
    factory = module
    for part in attr.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise ValueError(f"component factory {path!r}: {module_name} has no attribute {attr!r}") from None
    if not callable(factory):
        raise ValueError(f"component factory {path!r} is not callable")
    return factory


def build_component(spec: str, **kwargs: Any) -> Any:
    """Calls the factory of `spec` with `kwargs` and returns the component."""
    return resolve_factory(spec)(**kwargs)
