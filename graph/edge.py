"""Edges between ports: `GraphEdge` (whole values) and `StreamingGraphEdge` (items
that flow while the producer still runs, grouped by a chunk policy)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from graph.chunking import ChunkPolicy, FixedChunk
from core.errors import GraphError
from graph.node import check_name


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """"node.port" -> ("node", "port")."""
    node, sep, port = endpoint.partition(".")
    if not sep:
        raise GraphError(f"edge endpoint {endpoint!r} is not 'node.port'")
    check_name("edge endpoint node", node)
    check_name("edge endpoint port", port)
    return node, port


@dataclass(frozen=True)
class GraphEdge:
    """src "node.port" -> dst "node.port"; the dst fires once all its inputs for the
    same (request, iteration) are present."""

    src: str
    dst: str

    def __post_init__(self) -> None:
        split_endpoint(self.src)
        split_endpoint(self.dst)

    @cached_property  # read per streamed item: split once (not a field: eq and hash stay src, dst)
    def src_node(self) -> str:
        return self.src.partition(".")[0]

    @cached_property
    def src_port(self) -> str:
        return self.src.partition(".")[2]

    @cached_property
    def dst_node(self) -> str:
        return self.dst.partition(".")[0]

    @cached_property
    def dst_port(self) -> str:
        return self.dst.partition(".")[2]

    @property
    def is_streaming(self) -> bool:
        return False

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst}"


@dataclass(frozen=True)
class StreamingGraphEdge(GraphEdge):
    """Items flow as produced; the consumer fires per chunk formed by `chunk_policy`.

    continue_after_producer_done: the consumer keeps stepping after the producer's
        stream ended (the talker after the thinker's EOS).
    max_buffered: bound on items held for one (request, edge); a producer past it
        is parked (backpressure), never the whole stream.
    """

    chunk_policy: ChunkPolicy = field(default_factory=lambda: FixedChunk(1))
    continue_after_producer_done: bool = False
    max_buffered: int = 4096

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_buffered < self.chunk_policy.min_buffer:
            raise GraphError(
                f"edge {self}: max_buffered {self.max_buffered} is below the chunk policy's "
                f"minimum {self.chunk_policy.min_buffer}"
            )

    @property
    def is_streaming(self) -> bool:
        return True

    @property
    def is_per_item(self) -> bool:
        """One item per chunk: traced as one span per (request, edge) with percentiles,
        not a span per chunk (tracing must stay cheap on per-token edges)."""
        return self.chunk_policy == FixedChunk(1)
