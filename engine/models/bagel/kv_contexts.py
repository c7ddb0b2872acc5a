"""BAGEL's tagged KV contexts on the engine's paged pool.

A request builds up to three contexts on one backbone (`gen`, `cfg_text`, `cfg_img`),
each a chain of pool blocks plus its next rope position. fork() shares every block of a
context (one more reference each, nothing copied); writing into a shared last block
copies it first (KVPool's copy-on-write), so blocks two contexts have in common (a system
prompt, an image) are stored once. extend() computes rows and stores their K/V; query()
computes rows over contexts without storing anything (a denoising step's latent queries,
every guidance branch in one forward). Contexts are named by (request, name) tags; free()
and free_request() give their blocks back.

Rows (engine/models/bagel/rows.py) carry what a step needs beyond ids: input embeddings
[n, hidden], the expert of each row, its rope position, its segment (an image's rows
attend to each other both ways).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.errors import InvalidArgument, NotFound
from engine.batch import ScheduledBatch
from engine.kv_pool import KVPool
from engine.model_runner import ModelRunner

Tag = tuple[str, str]  # (request id, context name)


@dataclass
class Rows:
    embeds: torch.Tensor        # [n, hidden] input rows
    experts: list[int]          # [n] 0 understanding, 1 generation
    positions: list[int]        # [n] rope positions
    segments: list[int]         # [n] 0 causal; rows sharing a non-zero id attend both ways

    def __len__(self) -> int:
        return len(self.experts)


class _NoIds:
    """token_ids of a context fed rows only: the runner slices it for placeholder ids."""

    def __getitem__(self, span: slice) -> list[int]:
        return [0] * len(range(*span.indices(span.stop or 0)))


@dataclass(eq=False)
class KVContext:
    tag: Tag
    rope: int = 0                                   # the next input's rope position
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0                      # rows with K/V in the blocks
    token_ids = _NoIds()
    media = None
    input_embeds = None

    @property
    def request_id(self) -> str:
        return f"{self.tag[0]}/{self.tag[1]}"

    @property
    def num_tokens(self) -> int:
        return self.num_cached_tokens


class BagelKV:
    def __init__(self, model, num_blocks: int = 1024, block_size: int = 16, device: str = "cpu") -> None:
        self.model = model
        self.runner = ModelRunner(model, num_blocks, block_size, device=device)
        self.pool = KVPool(num_blocks, block_size, self.runner.copy_block)
        self.contexts: dict[Tag, KVContext] = {}
        self.rows_written = 0   # rows whose K/V were computed and stored (prefill + decode)
        self.rows_queried = 0   # rows computed without storing (denoising queries)
        self.num_forwards = 0   # backbone forwards run (extend and query)

    # -- naming ----------------------------------------------------------------------
    def get(self, tag: Tag) -> KVContext:
        ctx = self.contexts.get(tag)
        if ctx is None:
            raise NotFound(f"no KV context {tag[1]!r} for request {tag[0]!r}")
        return ctx

    def new(self, tag: Tag) -> KVContext:
        if tag in self.contexts:
            raise InvalidArgument(f"KV context {tag[1]!r} of request {tag[0]!r} exists")
        ctx = self.contexts[tag] = KVContext(tag)
        return ctx

    def fork(self, source: Tag, tag: Tag) -> KVContext:
        """tag (replaced if it exists) shares every block of source."""
        src = self.get(source)
        self.free(tag)
        return self.adopt(tag, src.block_table, src.num_cached_tokens, src.rope)

    def adopt(self, tag: Tag, blocks: list[int], num_tokens: int, rope: int) -> KVContext:
        """tag reads `blocks` (num_tokens rows, next rope position `rope`), one more
        reference each: a kept context's chain continued."""
        if tag in self.contexts:
            raise InvalidArgument(f"KV context {tag[1]!r} of request {tag[0]!r} exists")
        self.pool.incref(blocks)
        ctx = self.contexts[tag] = KVContext(tag, rope, list(blocks), num_tokens)
        return ctx

    def free(self, tag: Tag) -> None:
        ctx = self.contexts.pop(tag, None)
        if ctx is not None:
            self.pool.decref(ctx.block_table, ctx.request_id)
            ctx.block_table = []

    def free_request(self, request_id: str) -> None:
        for tag in [t for t in self.contexts if t[0] == request_id]:
            self.free(tag)

    def holders(self) -> list[list[int]]:
        return [c.block_table for c in self.contexts.values()]

    def rows_kv(self, tag: Tag) -> torch.Tensor:
        """The K/V a context holds, every layer: [layers, 2, rows, Hkv, D] (tests compare them)."""
        ctx = self.get(tag)
        size = self.pool.block_size
        slots = torch.tensor([ctx.block_table[i // size] * size + i % size for i in range(ctx.num_cached_tokens)],
                             device=self.runner.device)
        return torch.stack([torch.stack([k.flatten(0, 1)[slots], v.flatten(0, 1)[slots]])
                            for k, v in self.runner.kv_caches]).cpu()

    def check(self, other_holders=()) -> None:
        """The pool's refcounts against these contexts' tables and other holders (kept contexts)."""
        self.pool.check_integrity([*self.holders(), *other_holders])

    # -- steps -----------------------------------------------------------------------
    def extend(self, items: list[tuple[KVContext, Rows]]) -> list[torch.Tensor]:
        """Computes each context's new rows and stores their K/V (one forward); -> final
        normed hidden [n_i, hidden] per item."""
        for ctx, rows in items:
            self.pool.allocate(ctx, len(rows))
        out = self._forward(items, write=True)
        for ctx, rows in items:
            ctx.num_cached_tokens += len(rows)
        self.rows_written += sum(len(r) for _, r in items)
        return out

    def query(self, items: list[tuple[KVContext, Rows]]) -> list[torch.Tensor]:
        """Rows over contexts without storing them (the pool is left as it was)."""
        self.rows_queried += sum(len(r) for _, r in items)
        return self._forward(items, write=False)

    @torch.inference_mode()
    def _forward(self, items: list[tuple[KVContext, Rows]], write: bool) -> list[torch.Tensor]:
        self.num_forwards += 1
        seqs, rows = [c for c, _ in items], [r for _, r in items]
        batch = ScheduledBatch(seqs, [len(r) for r in rows], expert_ids=[r.experts for r in rows],
                               segment_ids=[r.segments for r in rows], write_kv=[write] * len(seqs))
        input_ids, _, meta = self.runner.prepare(batch, self.pool)
        device = self.runner.device
        positions = torch.tensor([p for r in rows for p in r.positions], dtype=torch.int64, device=device)
        experts = torch.tensor([e for r in rows for e in r.experts], dtype=torch.int64, device=device)
        embeds = torch.cat([r.embeds for r in rows]).to(device)
        hidden, _ = self.model(input_ids.to(device), positions, meta, self.runner.kv_caches,
                               inputs_embeds=embeds, expert_ids=experts)
        return list(hidden.split([len(r) for r in rows]))
