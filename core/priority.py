"""A service process's CPU priority: the nice increment a deployment gives it.

One rule for the deployment file's `nice` and `starmesh serve --nice`: an int from 0
(the default priority) to 19 (the lowest), as nice(1). Only lowering is allowed, so no
privilege is needed.
"""
from __future__ import annotations

MAX_NICE = 19


def is_nice(value: object) -> bool:
    """An int in [0, MAX_NICE] (a bool is not a priority)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NICE
