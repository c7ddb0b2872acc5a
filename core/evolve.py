"""A copy of a frozen dataclass with some fields changed, without re-running its checks.

`dataclasses.replace` re-runs `__init__` and `__post_init__`: a few microseconds that
the per-item paths (one chunk run per streamed item, one push per chunk) pay many times
for nothing, since the original was validated once when it was built. `evolve` copies
the instance's fields and sets the changed ones.

Contract: the caller only changes fields that the class's checks do not cover, or sets
them to values that were already checked; a field name the class does not have is an
error (as with `replace`). Only for dataclasses without `__slots__`.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")

_FIELD_NAMES: dict[type, frozenset[str]] = {}


def evolve(obj: T, **changes: Any) -> T:
    cls = type(obj)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    unknown = changes.keys() - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
    new = object.__new__(cls)
    state = new.__dict__  # frozen dataclasses block setattr, not their instance dict
    state.update(obj.__dict__)
    state.update(changes)
    return new
