"""One node run the conductor starts, as WalkState.ready() hands it to the executor."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conductor.walk_scope import Tag
from graph.chunking import Chunk
from runtime.items import ChunkInfo

Value = tuple[Any, ...]  # parts, concatenated along dim 0 by the consumer


@dataclass(frozen=True)
class Dispatch:
    """(node, iteration) is its identity within the request."""

    node: str
    iteration: Tag
    inputs: dict[str, Value]
    loop: Any = None  # the graph Loop run inside the component
    chunk: ChunkInfo | None = None  # where a chunk-fed or pushed run sits in its stream
    credits: dict[str, int] = field(default_factory=dict)  # output port -> items before the run is parked
    push: bool = False  # a chunk for the open run (node, iteration), not a new run


def chunk_info(chunk: Chunk) -> ChunkInfo:
    return ChunkInfo(chunk.start, chunk.num_context, chunk.is_last, chunk.num_pad)
