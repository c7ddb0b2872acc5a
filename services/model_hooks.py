"""A shared component's model hooks: "module:callable" paths the registry hands it, one per
registered model that customises it, imported only when the component is built.

A hook takes the checkpoint directory (and the component's options) and returns the
model's specifics for it, or None when the checkpoint is not that model's; so a shared
component never names a model, and a new model adds a hook instead of editing it.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable

from core.errors import InvalidArgument


def load_hook(path: str) -> Callable[..., Any]:
    """The callable `path` ("module:attr.attr") names, imported now: a hook, or any path
    the model registry names (pipelines, factories, tiny builders)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgument(f"{path!r} is not 'module:callable'")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidArgument(f"{path!r}: {module_name} has no attribute {attr!r}") from None
    return target


def hook_results(paths: Iterable[str], *args: Any, **kwargs: Any) -> list[Any]:
    """What every hook returns for these arguments, Nones left out, in `paths` order."""
    results = (load_hook(p)(*args, **kwargs) for p in paths)
    return [r for r in results if r is not None]


def first_hook(paths: Iterable[str], checkpoint: str, kind: type, component: str, expected: str | None = None):
    """What the first of `paths` that recognises `checkpoint` returns, checked to be a
    `kind`. None recognising it: None when `expected` is None (the component serves the
    checkpoint plainly), else INVALID_ARGUMENT naming the checkpoint and `expected`."""
    paths = tuple(paths)
    for path in paths:
        found = load_hook(path)(checkpoint)
        if found is None:
            continue
        if not isinstance(found, kind):
            raise InvalidArgument(f"hooks: {path} returned {type(found).__name__}, not a {kind.__name__}")
        return found
    if expected is None:
        return None
    raise InvalidArgument(f"checkpoint {checkpoint!r}: no registered model's {component} hook recognises it "
                          f"(expected {expected}; hooks: {list(paths) or 'none given'})")
