"""Paged KV block accounting with shared blocks. The KV tensors themselves belong to the
model runner (shape [num_blocks, block_size, ...] per layer); this only decides which
blocks hold what and who references them, so it stays cheap, device-free and easy to check.

A block is in exactly one of three states:
  free        no reference, no name: handed out first (FIFO);
  referenced  held by sequences' block tables, contexts or pins (a count per block);
  cached      no reference but named (core.block_hash): its K/V are kept for a later
              prompt that starts the same way, and evicted least recently used when the
              free list runs dry.
A referenced block may be named too (a full block a running sequence computed). Writing
into a block someone else references copies it first (copy_block, the runner's).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from itertools import chain, islice
from typing import TYPE_CHECKING, Callable, Iterable

from core.errors import ResourceExhausted

if TYPE_CHECKING:
    from engine.sequence import Sequence


class IntegrityError(RuntimeError):
    """The block accounting is inconsistent: a bug, never a user error."""


class KVPool:
    def __init__(self, num_blocks: int, block_size: int,
                 copy_block: Callable[[int, int], None] | None = None) -> None:
        # Both > 0: the config that sizes the pool validated them.
        self.block_size = block_size
        self.total = num_blocks
        # (src, dst): copy a block's K/V (and whatever else is kept per block); None: nothing
        # to copy (a pool without tensors, e.g. the scheduler's tests)
        self.copy_block = copy_block
        self._free: deque[int] = deque(range(num_blocks))
        self._refs = [0] * num_blocks
        self._name: list[bytes | None] = [None] * num_blocks
        self._by_name: dict[bytes, int] = {}
        self._cached: OrderedDict[int, None] = OrderedDict()  # unreferenced named blocks, LRU first
        self._num_used = 0
        self.num_evicted = 0  # cached blocks reused for something else
        self.num_copied = 0   # copy-on-write copies

    # -- sizes ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take: free ones and cached ones (evicted on demand)."""
        return len(self._free) + len(self._cached)

    @property
    def num_used_blocks(self) -> int:
        """Referenced blocks."""
        return self._num_used

    @property
    def num_cached_blocks(self) -> int:
        """Named blocks, referenced or not."""
        return len(self._by_name)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def refcount(self, block: int) -> int:
        return self._refs[block]

    # -- one sequence's blocks ---------------------------------------------------------
    def _copy_needed(self, seq: Sequence) -> bool:
        """Whether seq's next write lands in a block someone else references too."""
        i = seq.num_cached_tokens // self.block_size
        return i < len(seq.block_table) and self._refs[seq.block_table[i]] > 1

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks for seq to hold num_cached_tokens + num_new_tokens tokens (one more
        when its next write must copy a shared block first)."""
        want = self.blocks_for(seq.num_cached_tokens + num_new_tokens)
        copy = num_new_tokens > 0 and self._copy_needed(seq)
        return max(0, want - len(seq.block_table)) + copy

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def next_free_blocks(self, n: int) -> list[int]:
        """The blocks the next n single-block allocations will hand out, in order (free
        ones FIFO, then cached ones LRU); engine/plan_ahead.py predicts a page table with it."""
        return list(islice(chain(self._free, self._cached), n))

    def max_new_tokens_fitting(self, seq: Sequence) -> int:
        """How many new tokens seq could take now: the rest of its blocks + the free ones."""
        spare = self.num_free_blocks - self._copy_needed(seq)
        capacity = (len(seq.block_table) + max(0, spare)) * self.block_size
        return max(0, capacity - seq.num_cached_tokens)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Room for num_new_tokens more of seq's tokens: new blocks appended to its table,
        and the block its next write lands in made its own (copied when shared)."""
        need = self.blocks_needed(seq, num_new_tokens)
        if need > self.num_free_blocks:
            raise ResourceExhausted(
                f"KV pool has {self.num_free_blocks} free blocks, request {seq.request_id!r} needs {need}")
        if num_new_tokens > 0:
            self._own_next_write(seq)
        for _ in range(self.blocks_for(seq.num_cached_tokens + num_new_tokens) - len(seq.block_table)):
            seq.block_table.append(self._pop())

    def _own_next_write(self, seq: Sequence) -> None:
        i = seq.num_cached_tokens // self.block_size
        if i >= len(seq.block_table):
            return
        block = seq.block_table[i]
        if self._refs[block] > 1:  # copy-on-write
            copy = self._pop()
            if self.copy_block is not None:
                self.copy_block(block, copy)
            self._release(block, seq.request_id)
            seq.block_table[i] = copy
            self.num_copied += 1
        elif self._name[block] is not None:  # ours alone: its content changes, so its name goes
            self._unname(block)

    def free(self, seq: Sequence) -> None:
        """Drops seq's references; the tail first, so its blocks are evicted before the head's."""
        for block in reversed(seq.block_table):
            self._release(block, seq.request_id)
        seq.block_table.clear()

    # -- references ----------------------------------------------------------------------
    def take(self, seq: Sequence, blocks: list[int]) -> None:
        """Appends referenced or cached blocks to seq's table, by reference."""
        self.incref(blocks)
        seq.block_table.extend(blocks)

    def incref(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            if self._refs[block] == 0:
                if block not in self._cached:
                    raise IntegrityError(f"block {block} taken by reference but it is free")
                del self._cached[block]
                self._num_used += 1
            self._refs[block] += 1

    def decref(self, blocks: Iterable[int], holder: str = "a holder") -> None:
        for block in blocks:
            self._release(block, holder)

    def _release(self, block: int, holder: str) -> None:
        refs = self._refs[block]
        if refs <= 0:
            raise IntegrityError(f"block {block} released by {holder!r} but it holds no reference")
        self._refs[block] = refs - 1
        if refs == 1:
            self._num_used -= 1
            if self._name[block] is not None:
                self._cached[block] = None  # most recently used end
            else:
                self._free.append(block)

    def _pop(self) -> int:
        if self._free:
            block = self._free.popleft()
        else:
            block, _ = self._cached.popitem(last=False)
            self._unname(block)
            self.num_evicted += 1
        self._refs[block] = 1
        self._num_used += 1
        return block

    # -- names ---------------------------------------------------------------------------
    def lookup(self, names: Iterable[bytes]) -> list[int]:
        """The blocks of the leading names held (the first miss ends the run). `names` may
        be lazy: it is read only up to the first miss."""
        out = []
        for name in names:
            block = self._by_name.get(name)
            if block is None:
                break
            out.append(block)
        return out

    def register(self, block: int, name: bytes) -> bool:
        """Names a referenced full block. False when it is named already or another block
        holds the same content (that one stays the cached copy)."""
        if self._refs[block] == 0:
            raise IntegrityError(f"block {block} named while nobody references it")
        if self._name[block] is not None or name in self._by_name:
            return False
        self._name[block] = name
        self._by_name[name] = block
        return True

    def name_of(self, block: int) -> bytes | None:
        return self._name[block]

    def _unname(self, block: int) -> None:
        del self._by_name[self._name[block]]
        self._name[block] = None

    def recent_names(self, limit: int) -> list[bytes]:
        """Up to `limit` names held, in use first, then cached most recently used first."""
        used = (self._name[b] for b in range(self.total) if self._refs[b] and self._name[b] is not None)
        cached = (self._name[b] for b in reversed(self._cached))
        return list(islice(chain(used, cached), limit))

    # -- checks --------------------------------------------------------------------------
    def check_integrity(self, holders: Iterable[Iterable[int]] | None = None) -> None:
        """The pool against itself; with `holders` (every block list that holds references:
        block tables, contexts, pins), each refcount against the references held."""
        free, cached = set(self._free), set(self._cached)
        used = {b for b in range(self.total) if self._refs[b] > 0}
        if len(free) != len(self._free):
            raise IntegrityError("free list has duplicates")
        if free & used or cached & used:
            raise IntegrityError(f"blocks both free and used: {sorted((free | cached) & used)}")
        if free & cached:
            raise IntegrityError(f"blocks both free and cached: {sorted(free & cached)}")
        if len(free) + len(cached) + len(used) != self.total:
            raise IntegrityError(f"free {len(free)} + cached {len(cached)} + used {len(used)} != total {self.total}")
        if not all(0 <= b < self.total for b in free):
            raise IntegrityError("block id out of range")
        if len(used) != self._num_used or any(r < 0 for r in self._refs):
            raise IntegrityError(f"{len(used)} blocks referenced, the count says {self._num_used}")
        if any(self._name[b] is not None for b in free) or any(self._name[b] is None for b in cached):
            raise IntegrityError("a free block is named or a cached one is not")
        if {b: n for b, n in enumerate(self._name) if n is not None} != {b: n for n, b in self._by_name.items()}:
            raise IntegrityError("block names and the name index disagree")
        if holders is not None:
            self._check_refs(holders)

    def _check_refs(self, holders: Iterable[Iterable[int]]) -> None:
        held = [0] * self.total
        for blocks in holders:
            for b in blocks:
                if not 0 <= b < self.total:
                    raise IntegrityError(f"block id {b} out of range")
                held[b] += 1
        wrong = [b for b in range(self.total) if held[b] != self._refs[b]]
        if wrong:
            b = wrong[0]
            raise IntegrityError(f"block {b} has refcount {self._refs[b]} but {held[b]} references are held "
                                 f"({len(wrong)} blocks disagree)")
