"""A toy-tagger request's params, parsed by the pipeline (strictly: every key known) and
by the tagger component (its part); every bad value is InvalidArgument naming
`params.<key>`. Light: no torch import (the conductor reads it too)."""
from __future__ import annotations

from dataclasses import dataclass

from core.params import RequestParams, param

MAX_LEN = 1 << 16  # bytes one request may have tagged


@dataclass(frozen=True)
class TaggerParams(RequestParams):
    # No temperature: a tag is the argmax of its byte's logits, so the same prompt always
    # gets the same tags (what the fidelity test compares).
    max_len: int = param(4096, min=1, max=MAX_LEN, help="bytes tagged: the prompt's first max_len bytes")
