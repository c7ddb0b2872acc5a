"""Per-request chunk policy overrides: a request may ask its LeftContext edges for a
smaller (or larger) first chunk (param `first_chunk`, frames), like vLLM-Omni's
`initial_codec_chunk_frames`; C and L stay the deployment's."""
from __future__ import annotations

import dataclasses

from core.errors import InvalidArgument
from core.params import ParamSpec
from graph.chunking import ChunkPolicy, LeftContext

# Read as a pipeline's typed params read their keys (any model may stream a LeftContext edge).
FIRST_CHUNK = ParamSpec("first_chunk", int, None, min=0, help="frames of the first window of LeftContext edges")


def first_chunk_param(params: dict) -> int | None:
    return FIRST_CHUNK.check(params.get("first_chunk"))


def request_policy(edge, params: dict) -> ChunkPolicy:
    """The edge's chunk policy for one request (its own first_chunk, when it asks)."""
    policy = edge.chunk_policy
    first = first_chunk_param(params)
    if first is None or not isinstance(policy, LeftContext):
        return policy
    policy = dataclasses.replace(policy, first=first)
    if policy.min_buffer > edge.max_buffered:
        raise InvalidArgument(f"params.first_chunk {first} does not fit edge {edge}'s buffer of "
                              f"{edge.max_buffered} items")
    return policy
