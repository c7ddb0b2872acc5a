"""BAGEL contexts kept past their request, for a follow-up to continue, on the engine's
kept-context table (engine/contexts.py: owners, TTL, block limits, least recently used
first, tombstones that say why an id went).

A kept context is two chains of the backbone's pool blocks, two table entries under one
id: `gen` (everything the request put in, an answer it decoded with its closing im_end)
and `<id>/texts` (its text inputs and answer alone: what a guided follow-up's cfg_img
starts from). Beside them: each chain's next rope position, the framed ids of the texts,
and the digests of the images whose ViT tokens gen holds (an edit following up on the
same image adds only its VAE tokens). A follow-up takes both chains by reference and
computes only what it adds.
"""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from core.errors import NotFound
from engine.context_prompt import Content
from engine.contexts import ContextLimits, ContextTable
from engine.models.bagel.kv_contexts import BagelKV, KVContext
from engine.models.bagel.rows import text_rows

TEXTS = "/texts"  # the second entry's id suffix


@dataclass(frozen=True)
class KeptBagel:
    """A kept context as a follow-up reads it (its blocks are referenced by the table)."""
    context_id: str
    gen: tuple[list[int], int, int]        # (blocks, rows, next rope)
    text_only: tuple[list[int], int, int]
    texts: tuple[tuple[int, ...], ...]
    images: tuple[str, ...]


class KeptContexts:
    def __init__(self, kv: BagelKV, limits: ContextLimits = ContextLimits(), clock=time.time) -> None:
        self.kv = kv
        self.table = ContextTable(kv.pool, limits, clock)
        self._meta: dict[str, tuple[int, int, tuple, tuple]] = {}  # id -> (gen rope, texts rope, texts, images)
        # contexts, not table entries (each context is two): kept, and dropped by TTL or limits
        self.kept_total = 0
        self.dropped_total = 0

    def __len__(self) -> int:
        self._forget_dropped()
        return len(self._meta)

    @property
    def num_blocks(self) -> int:
        return self.table.num_blocks

    def keep(self, ctx, owner: str, context_id: str | None = None) -> str:
        """Keeps request contexts `ctx` (request_contexts.RequestContexts) under a new id."""
        context_id = secrets.token_hex(16) if context_id is None else context_id
        gen = self.kv.get(ctx.tag("gen"))
        built = (ctx.request_id, "cfg_img") not in self.kv.contexts
        texts = self._texts_only(ctx) if built else self.kv.get((ctx.request_id, "cfg_img"))
        try:
            self._meta[context_id] = (gen.rope, texts.rope, tuple(tuple(t) for t in ctx.texts), tuple(ctx.images))
            self.table.add(owner, _content(texts), texts.block_table, context_id + TEXTS)
            self.table.add(owner, _content(gen), gen.block_table, context_id)
        finally:
            if built:
                self.kv.free(texts.tag)
        self.kept_total += 1
        self._forget_dropped()
        return context_id

    def _texts_only(self, ctx) -> KVContext:
        """An unguided request built no texts-only context: its texts, computed once here."""
        texts = self.kv.new((ctx.request_id, "kept_texts"))
        for ids in ctx.texts:
            rows, rope = text_rows(self.kv.model, list(ids), texts.rope)
            self.kv.extend([(texts, rows)])
            texts.rope = rope
        return texts

    def get(self, context_id: str, owner: str) -> KeptBagel:
        """NotFound naming params.context_id for an id its owner does not hold (or that went)."""
        self.table.expire()
        self._forget_dropped()
        try:
            gen = self.table.get(context_id, owner)
            texts = self.table.get(context_id + TEXTS, owner)
        except NotFound as e:
            raise NotFound(f"params.context_id: {e}") from None
        gen_rope, text_rope, text_ids, images = self._meta[context_id]
        return KeptBagel(context_id, (gen.blocks, gen.content.num_computed, gen_rope),
                         (texts.blocks, texts.content.num_computed, text_rope), text_ids, images)

    def release(self, context_id: str, owner: str) -> None:
        self.get(context_id, owner)
        self.table.release(context_id, owner)
        self.table.release(context_id + TEXTS, owner)
        del self._meta[context_id]  # released, not dropped

    def _forget_dropped(self) -> None:
        """An id whose entries the table dropped (limits, TTL) goes entirely."""
        for cid in [c for c in self._meta if c not in self.table or c + TEXTS not in self.table]:
            del self._meta[cid]
            self.dropped_total += 1
            for entry in (cid, cid + TEXTS):
                held = [c for c in self.table.values() if c.context_id == entry]
                if held:
                    self.table.release(entry, held[0].owner)

    def holders(self) -> list[list[int]]:
        return self.table.holders()


def _content(ctx: KVContext) -> Content:
    """The table's view of a chain: as many (placeholder) tokens as it has rows, all computed."""
    return Content((0,) * ctx.num_cached_tokens, ctx.num_cached_tokens)
