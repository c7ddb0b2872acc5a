"""CUDA graphs for decode steps: one captured forward per batch size.

A decode step of n sequences (one query token each) runs as the graph captured for the
smallest size b >= n (sizes 1, 2, 4, ..., max_num_seqs): the step is padded to b rows.
Padding rows read token 0 at position 0 and write their K/V into a scratch KV block
that the pool never hands out (the runner allocates num_blocks + 1 blocks; the last is
the scratch one); they attend to that one slot only, and their logits are dropped.
Prefill or mixed steps, steps with fed embeddings, and steps past the largest size run
eagerly.

What a graph reads lives at fixed addresses: the static inputs (ids, positions, slot
mapping, [max size] each) and, per size, a FlashInfer decode wrapper in CUDA-graph mode
whose page-table buffers are sized for b sequences and num_blocks + max size pages.
Before each replay the step's inputs are copied into the static buffers and the
wrapper is planned for the step (both queued on the current stream, so after the
previous step's kernels). Graph steps are planned just before their replay, not ahead:
the captured kernels read that one wrapper's buffers, and FlashInfer's plan() stages
its plan info through the wrapper's one pinned host buffer with an asynchronous copy,
so planning step N+1 into it while step N is in flight could overwrite that buffer
before step N's copy has read it (planning graph steps ahead would need a second
wrapper and graph per size; eager steps are planned ahead, engine/cuda_runner.py).

Pure functions (sizes, buckets, padding) run anywhere; capture and replay need CUDA
and FlashInfer. Models whose forward synchronises with the host (the MoE experts read
their token counts back) cannot be captured and run eagerly.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine.attention.flashinfer_backend import FlashInferPlan, PageTable
from engine.attention.metadata import AttentionMetadata
from engine.device_option import copy_into

log = logging.getLogger("engine.cuda_graphs")


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """Powers of two below max_num_seqs, then max_num_seqs: [1, 2, 4, ..., max]."""
    sizes, b = [], 1
    while b < max_num_seqs:
        sizes.append(b)
        b *= 2
    return sizes + [max_num_seqs]


def bucket_for(n: int, sizes: list[int]) -> int | None:
    """The smallest captured size that holds n sequences; None past the largest."""
    return next((b for b in sorted(sizes) if b >= n), None)


def is_decode_only(meta: AttentionMetadata) -> bool:
    """Every sequence has exactly one query token (host metadata: no device sync)."""
    return meta.num_seqs > 0 and int(meta.query_start_loc[-1]) == meta.num_seqs


def pad_decode(input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, size: int,
               scratch_block: int) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """A decode step of n sequences padded to `size` rows (host tensors).

    input_ids/positions [n] -> [size]: padding rows read token 0 at position 0;
    meta -> query_start_loc arange(size + 1), seq_lens [size] (1 for padding rows),
    block_tables [size, width] (padding rows: the scratch block, then -1), slot_mapping
    [size] (padding rows: the scratch block's first slot)."""
    n = meta.num_seqs
    if not is_decode_only(meta) or not n <= size:
        raise ValueError(f"pad_decode: needs a decode step of at most {size} sequences")
    pad = size - n
    block_tables = torch.full((size, max(1, meta.block_tables.shape[1])), -1, dtype=torch.int32)
    block_tables[:n, :meta.block_tables.shape[1]] = meta.block_tables
    block_tables[n:, 0] = scratch_block
    padded = AttentionMetadata(
        query_start_loc=torch.arange(size + 1, dtype=torch.int32),
        seq_lens=torch.cat([meta.seq_lens.int(), torch.ones(pad, dtype=torch.int32)]),
        block_tables=block_tables,
        slot_mapping=torch.cat([meta.slot_mapping.long(),
                                torch.full((pad,), scratch_block * meta.block_size, dtype=torch.int64)]),
        block_size=meta.block_size,
    )
    zeros = torch.zeros(pad, dtype=torch.int64)
    return torch.cat([input_ids.long(), zeros]), torch.cat([positions.long(), zeros]), padded


def graph_unsupported_reason(model) -> str | None:
    """Why a model's decode forward cannot be captured, or None."""
    from engine.models.moe import SparseMoE

    if any(isinstance(m, SparseMoE) for m in model.modules()):
        return "its MoE layers read expert token counts back to the host (a sync inside the graph)"
    if getattr(model, "offload_backend", None) is not None:
        return "layerwise offload streams weights from the host each step"
    return None


class _FixedPlan:
    """The attention backend a graph is captured with: every prepare() returns the plan
    made for the graph's wrapper; forward() is the FlashInfer backend's."""

    name = "flashinfer-graph"

    def __init__(self, backend, plan: FlashInferPlan) -> None:
        self.backend, self.plan = backend, plan

    def prepare(self, meta: AttentionMetadata) -> FlashInferPlan:
        return self.plan

    def forward(self, plan, *args):
        return self.backend.forward(plan, *args)


@dataclass
class _Graph:
    graph: object                    # torch.cuda.CUDAGraph
    wrapper: object                  # its FlashInfer decode wrapper (CUDA-graph mode)
    outputs: tuple                   # (logits [b, V] fp32, hidden [b, h], captured [b, h] | None, embeds | None)


class DecodeGraphs:
    """Captures decode forwards for `sizes` on construction; run() replays one."""

    def __init__(self, model, backend, kv_caches, sizes: list[int], block_size: int, num_blocks: int,
                 capture_layer: int | None = None, return_embeddings: bool = False) -> None:
        self.model, self.backend, self.kv_caches = model, backend, kv_caches
        self.sizes = sorted(sizes)
        self.block_size = block_size
        self.scratch_block = num_blocks  # the extra block past the pool's
        self.capture_layer, self.return_embeddings = capture_layer, return_embeddings
        device = backend.device
        max_size = self.sizes[-1]
        self.input_ids = torch.zeros(max_size, dtype=torch.int64, device=device)  # [max]
        self.positions = torch.zeros(max_size, dtype=torch.int64, device=device)  # [max]
        self.slot_mapping = torch.zeros(max_size, dtype=torch.int64, device=device)  # [max]
        self.max_pages = num_blocks + max_size  # real sequences own distinct blocks; one scratch page per pad row
        self._workspace = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=device)  # shared: replays serialise
        self._pool = None  # the graphs' shared memory pool, made at the first capture
        self.graphs: dict[int, _Graph] = {}
        for b in reversed(self.sizes):  # largest first, so smaller graphs reuse its pool memory
            self.graphs[b] = self._capture(b)
        self.num_replays = 0

    def fits(self, meta: AttentionMetadata) -> bool:
        return is_decode_only(meta) and meta.num_seqs <= self.sizes[-1]

    def _meta(self, size: int) -> AttentionMetadata:
        """The metadata a graph of `size` rows is captured with: host placeholders of a
        step of padding rows, and the static slot mapping (the only field FlashInfer's
        forward reads; its page table lives in the wrapper)."""
        return AttentionMetadata(query_start_loc=torch.arange(size + 1, dtype=torch.int32),
                                 seq_lens=torch.ones(size, dtype=torch.int32),
                                 block_tables=torch.full((size, 1), self.scratch_block, dtype=torch.int32),
                                 slot_mapping=self.slot_mapping[:size], block_size=self.block_size)

    def _forward(self, size: int, meta: AttentionMetadata) -> tuple:
        ids, positions = self.input_ids[:size], self.positions[:size]
        hidden, captured = self.model(ids, positions, meta, self.kv_caches, capture_layer=self.capture_layer)
        embeds = self.model.embed(ids) if self.return_embeddings else None
        return self.model.compute_logits(hidden), hidden, captured, embeds

    def _setup(self, size: int) -> tuple[AttentionMetadata, object]:
        """The metadata and planned wrapper a graph of `size` rows is captured with; the
        static inputs hold padding rows, so warmup and capture write only the scratch slot."""
        meta = self._meta(size)
        self.input_ids.zero_()
        self.positions.zero_()
        self.slot_mapping.fill_(self.scratch_block * self.block_size)
        wrapper = self.backend.graph_decode_wrapper(size, self.max_pages, self._workspace)
        self.backend.plan_decode(wrapper, PageTable.of(meta))
        return meta, wrapper

    @contextmanager
    def _fixed_plan(self, meta: AttentionMetadata, wrapper):
        self.model.set_attention_backend(_FixedPlan(self.backend, FlashInferPlan(meta, wrapper)))
        try:
            yield
        finally:
            self.model.set_attention_backend(self.backend)

    @torch.inference_mode()
    def _capture(self, size: int) -> _Graph:
        meta, wrapper = self._setup(size)
        with self._fixed_plan(meta, wrapper):
            self._forward(size, meta)  # warmup: lazy initialisation (rope tables, kernels) outside capture
            torch.cuda.synchronize(self.backend.device)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                outputs = self._forward(size, meta)
        return _Graph(graph, wrapper, outputs)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> tuple:
        """Replays the graph for a decode step (host inputs, n sequences) -> (logits [n, V],
        hidden [n, h], captured [n, h] | None, embeds [n, h] | None), views of the graph's
        static outputs: valid until the next replay."""
        n = meta.num_seqs
        size = bucket_for(n, self.sizes)
        ids, pos, padded = pad_decode(input_ids, positions, meta, size, self.scratch_block)
        entry = self.graphs[size]
        copy_into(self.input_ids[:size], ids)
        copy_into(self.positions[:size], pos)
        copy_into(self.slot_mapping[:size], padded.slot_mapping)
        self.backend.plan_decode(entry.wrapper, PageTable.of(padded))
        entry.graph.replay()
        self.num_replays += 1
        return tuple(None if t is None else t[:n] for t in entry.outputs)


def capture_decode_graphs(model, backend, kv_caches, sizes: list[int], block_size: int, num_blocks: int,
                          capture_layer: int | None, return_embeddings: bool) -> DecodeGraphs | None:
    """DecodeGraphs, or None (logged) when the model cannot be captured or capture fails:
    the engine then runs every step eagerly."""
    reason = graph_unsupported_reason(model)
    if reason is None and not sizes:
        reason = "no batch sizes to capture"
    if reason is not None:
        log.warning("CUDA graphs off: %s; decode steps run eagerly", reason)
        return None
    try:
        graphs = DecodeGraphs(model, backend, kv_caches, sizes, block_size, num_blocks, capture_layer,
                              return_embeddings)
    except Exception as e:  # e.g. an op that syncs with the host during capture (tests/gpu asserts none here)
        log.warning("CUDA graphs off: capture failed (%s: %s); decode steps run eagerly", type(e).__name__, e)
        model.set_attention_backend(backend)
        return None
    log.info("captured decode CUDA graphs for batch sizes %s", graphs.sizes)
    return graphs
