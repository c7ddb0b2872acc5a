"""Named contexts: K/V an engine keeps past the request that computed it.

A context is a pinned chain of pool blocks (one reference each) plus what a later request
needs to continue it: its token ids (the next position is their count), how many of them
have K/V in the blocks, and the inputs that shaped them (fed embedding rows, media rows
and rope ids, whose `delta` says where decode positions go on). A request that starts from
a context takes its blocks by reference; fork shares every block; truncate releases the
blocks past a position (a shared last block is copied on the next write: engine.kv_pool).

Each context belongs to an owner (an API-key hash or connection id the caller gives):
any other owner gets NotFound, the same as for an id that never existed. Contexts unused
for ttl_s are dropped, and past the per-owner or global block limits the least recently
used are dropped; never one that is pinned or that a live request uses. Naming a dropped
context says so (a bounded set of tombstones). Ids are 128 random bits.
"""
from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from core.errors import InvalidArgument, NotFound
from engine.context_prompt import Content
from engine.kv_pool import IntegrityError, KVPool

MAX_ID_LEN = 128


def _check_owner(owner) -> None:
    if not isinstance(owner, str) or not owner:
        raise InvalidArgument(f"context owner must be a non-empty string, got {owner!r}")


@dataclass(frozen=True)
class ContextRequest:
    """What a request does with contexts. owner: whose contexts it may name; context_id:
    continue this context (the prompt = its tokens + the request's); keep: keep the
    finished request as a new context, named keep_id (default: 128 random bits; one id
    lets a model's engines keep their parts of one turn under one name)."""

    owner: str
    context_id: str | None = None
    keep: bool = False
    keep_id: str | None = None

    def __post_init__(self) -> None:
        _check_owner(self.owner)
        if self.context_id is not None and not isinstance(self.context_id, str):
            raise InvalidArgument(f"context_id must be a string, got {self.context_id!r}")
        if not isinstance(self.keep, bool):
            raise InvalidArgument(f"keep_context must be true or false, got {self.keep!r}")
        if self.keep_id is not None and (not isinstance(self.keep_id, str) or not 0 < len(self.keep_id) <= MAX_ID_LEN):
            raise InvalidArgument(f"keep_id must be a string of 1..{MAX_ID_LEN} characters, got {self.keep_id!r}")


@dataclass(frozen=True)
class Keep:
    """What a sequence leaves as it finishes: a new context of owner's named context_id
    (None: a random id), or, extending `into`, that context's new content (its prompt)."""

    owner: str
    context_id: str | None = None
    into: "Context | None" = None


@dataclass(frozen=True)
class ContextLimits:
    ttl_s: float = 600.0
    max_blocks: int = 256             # blocks all contexts pin (a block shared by two counts twice)
    max_blocks_per_owner: int = 256
    tombstones: int = 4096            # dropped ids remembered, to say "dropped" rather than "not found"

    def __post_init__(self) -> None:
        if isinstance(self.ttl_s, bool) or not isinstance(self.ttl_s, (int, float)) or not self.ttl_s > 0:
            raise InvalidArgument(f"context_ttl_s must be > 0, got {self.ttl_s!r}")
        for name in ("max_blocks", "max_blocks_per_owner", "tombstones"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"context {name} must be a positive integer, got {value!r}")


@dataclass
class Context:
    context_id: str
    owner: str
    content: Content          # token ids, computed count, embedding rows, media
    blocks: list[int]         # one pool reference each; hold content.num_computed tokens
    last_used_s: float
    pinned: bool = False
    users: int = 0            # live requests that continue it
    extending: str | None = None  # the request extending it in place

    @property
    def droppable(self) -> bool:
        return not self.pinned and self.users == 0 and self.extending is None


@dataclass(frozen=True)
class ContextInfo:
    context_id: str
    owner: str
    num_tokens: int           # its next position
    num_computed: int         # tokens with K/V in its blocks
    num_blocks: int
    pinned: bool
    in_use: bool
    expires_s: float | None   # unix seconds; None while pinned or in use


class ContextTable:
    def __init__(self, pool: KVPool, limits: ContextLimits = ContextLimits(), clock=time.time) -> None:
        self.pool, self.limits, self.clock = pool, limits, clock
        self._by_id: OrderedDict[str, Context] = OrderedDict()  # least recently used first
        self._tombstones: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (owner, why)
        self._owner_blocks: dict[str, int] = {}
        self.num_blocks = 0
        self.kept_total = 0
        self.dropped_total = 0
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._by_id)

    def is_live(self, ctx: Context) -> bool:
        return self._by_id.get(ctx.context_id) is ctx

    def __contains__(self, context_id: str) -> bool:
        return context_id in self._by_id

    # -- naming ------------------------------------------------------------------------
    def get(self, context_id: str, owner: str) -> Context:
        """The owner's context (marked used now); NotFound for any other."""
        _check_owner(owner)
        ctx = self._by_id.get(context_id) if isinstance(context_id, str) else None
        if ctx is None or ctx.owner != owner:
            gone = self._tombstones.get(context_id) if isinstance(context_id, str) else None
            if ctx is None and gone is not None and gone[0] == owner:
                raise NotFound(f"context {context_id!r} was dropped: {gone[1]}")
            raise NotFound(f"context {context_id!r} not found")
        ctx.last_used_s = self.clock()
        self._by_id.move_to_end(context_id)
        return ctx

    def info(self, context_id: str, owner: str) -> ContextInfo:
        ctx = self.get(context_id, owner)
        return ContextInfo(ctx.context_id, ctx.owner, ctx.content.num_tokens, ctx.content.num_computed,
                           len(ctx.blocks), ctx.pinned, ctx.users > 0 or ctx.extending is not None,
                           None if not ctx.droppable else ctx.last_used_s + self.limits.ttl_s)

    # -- lifecycle -------------------------------------------------------------------------
    def add(self, owner: str, content: Content, blocks: list[int], context_id: str | None = None) -> Context:
        """A new context over `blocks` (references taken here); limits enforced after."""
        _check_owner(owner)
        context_id = secrets.token_hex(16) if context_id is None else context_id
        if context_id in self._by_id:
            raise InvalidArgument(f"context id {context_id!r} is in use")
        if len(blocks) != self.pool.blocks_for(content.num_computed):
            raise IntegrityError(f"{len(blocks)} blocks for {content.num_computed} computed tokens")
        self.pool.incref(blocks)
        self._tombstones.pop(context_id, None)
        ctx = self._by_id[context_id] = Context(context_id, owner, content, list(blocks), self.clock())
        self._count(ctx, +1)
        self.kept_total += 1
        self._enforce(owner)
        return ctx

    def replace(self, ctx: Context, content: Content, blocks: list[int]) -> None:
        """ctx now holds `content` over `blocks` (an extension finished)."""
        self.pool.incref(blocks)
        self._count(ctx, -1)
        self.pool.decref(ctx.blocks, ctx.context_id)
        ctx.content, ctx.blocks, ctx.last_used_s = content, list(blocks), self.clock()
        self._count(ctx, +1)
        if self.is_live(ctx):
            self._by_id.move_to_end(ctx.context_id)
            self._enforce(ctx.owner)

    def fork(self, context_id: str, owner: str, num_tokens: int | None = None) -> str:
        """A new context of the owner's sharing the first num_tokens (default all) of this one."""
        ctx = self.get(context_id, owner)
        head = ctx.content.head(self._position(ctx, num_tokens))
        return self.add(owner, head, ctx.blocks[:self.pool.blocks_for(head.num_computed)]).context_id

    def truncate(self, context_id: str, owner: str, num_tokens: int) -> None:
        """The context goes back to its first num_tokens tokens; blocks past them are released."""
        ctx = self.get(context_id, owner)
        if ctx.extending is not None:
            raise InvalidArgument(f"context {context_id!r} is being extended by request {ctx.extending!r}")
        head = ctx.content.head(self._position(ctx, num_tokens))
        self.replace(ctx, head, ctx.blocks[:self.pool.blocks_for(head.num_computed)])

    def release(self, context_id: str, owner: str) -> None:
        self._drop(self.get(context_id, owner), "released by its owner")

    def pin(self, context_id: str, owner: str, pinned: bool = True) -> None:
        """A pinned context is never dropped for its TTL or the block limits."""
        self.get(context_id, owner).pinned = bool(pinned)

    @staticmethod
    def _position(ctx: Context, num_tokens: int | None) -> int:
        n = ctx.content.num_tokens
        if num_tokens is None:
            return n
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 0 < num_tokens <= n:
            raise InvalidArgument(f"num_tokens must be in 1..{n} (the context's length), got {num_tokens!r}")
        return num_tokens

    # -- dropping ----------------------------------------------------------------------------
    def expire(self) -> None:
        """Drops contexts unused past their TTL (a sweep at most every second)."""
        now = self.clock()
        if now < self._next_sweep or not self._by_id:
            return
        self._next_sweep = now + min(1.0, self.limits.ttl_s)
        for ctx in [c for c in self._by_id.values() if c.droppable and c.last_used_s + self.limits.ttl_s <= now]:
            self._drop(ctx, f"unused for its TTL of {self.limits.ttl_s:g} s")

    def _enforce(self, owner: str) -> None:
        """Least recently used first, drops what it may until both limits hold."""
        lim = self.limits
        for ctx in [c for c in self._by_id.values() if c.owner == owner and c.droppable]:
            if self._owner_blocks.get(owner, 0) <= lim.max_blocks_per_owner:
                break
            self._drop(ctx, f"its owner's contexts passed {lim.max_blocks_per_owner} KV blocks")
        for ctx in [c for c in self._by_id.values() if c.droppable]:
            if self.num_blocks <= lim.max_blocks:
                break
            self._drop(ctx, f"the engine's contexts passed {lim.max_blocks} KV blocks")

    def _drop(self, ctx: Context, why: str) -> None:
        del self._by_id[ctx.context_id]
        self._count(ctx, -1)
        self.pool.decref(ctx.blocks, ctx.context_id)
        ctx.blocks = []
        self._tombstones[ctx.context_id] = (ctx.owner, why)
        while len(self._tombstones) > self.limits.tombstones:
            self._tombstones.popitem(last=False)
        if not why.startswith("released"):
            self.dropped_total += 1

    def _count(self, ctx: Context, sign: int) -> None:
        n = sign * len(ctx.blocks)
        self.num_blocks += n
        left = self._owner_blocks.get(ctx.owner, 0) + n
        if left:
            self._owner_blocks[ctx.owner] = left
        else:
            self._owner_blocks.pop(ctx.owner, None)

    # -- checks ------------------------------------------------------------------------------
    def holders(self):
        return [ctx.blocks for ctx in self._by_id.values()]

    def values(self) -> list[Context]:
        return list(self._by_id.values())

    def check(self) -> None:
        if self.num_blocks != sum(len(c.blocks) for c in self._by_id.values()):
            raise IntegrityError("the context block count disagrees with the contexts")
        for ctx in self._by_id.values():
            if len(ctx.blocks) != self.pool.blocks_for(ctx.content.num_computed) or ctx.users < 0:
                raise IntegrityError(f"context {ctx.context_id!r} holds {len(ctx.blocks)} blocks for "
                                     f"{ctx.content.num_computed} tokens ({ctx.users} users)")
