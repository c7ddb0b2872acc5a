"""A sequence's block names (core.block_hash): what its full blocks of K/V are looked up
and registered by in the KV pool.

Block i's name chains over the names before it and everything its K/V depend on besides
the ids: the fed embedding rows of its positions (the talker's inputs), media rows spliced
in and deepstack rows added there, and its rope ids where they are not the position index
(multimodal rope). A bidirectional segment (tokens that attend to each other) that runs
past a block's end makes the rest of the segment part of that block's content: such a
block is reused only when the whole segment matches, and named only once all of it is
computed.

Names are computed lazily and kept: a lookup reads them only up to the first miss.
"""
from __future__ import annotations

import hashlib
from typing import Iterator

import torch

from core.block_hash import block_hash, model_seed, token_bytes


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw bytes of a tensor (any dtype, bf16 included), for hashing."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def _within(at: torch.Tensor, start: int, end: int) -> torch.Tensor:
    return (at >= start) & (at < end)


def content_bytes(seq, start: int, end: int) -> bytes:
    """What positions [start, end) of seq feed their K/V besides the ids (b"" for text)."""
    parts: list = []
    if seq.input_embeds is not None:
        parts.append(tensor_bytes(seq.input_embeds.rows(start, min(end, len(seq.input_embeds)))))
    media = seq.media
    if media is not None:
        positions = media.positions_of(start, end - start)  # [3, n]
        if not torch.equal(positions, torch.arange(start, end).expand(3, -1)):
            parts.append(tensor_bytes(positions))
        for at, values in ((media.rows_at, [media.rows]), (media.deepstack_at, media.deepstack)):
            keep = _within(at, start, end)
            if keep.any():
                parts.append(tensor_bytes(at[keep]))
                parts.extend(tensor_bytes(v[keep]) for v in values)
    if not parts:
        return b""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part)
    return h.digest()


class BlockChain:
    __slots__ = ("seed", "names", "num_registered")

    def __init__(self, seed: bytes) -> None:
        self.seed = seed
        self.names: list[bytes] = []   # names of blocks 0.. computed so far
        self.num_registered = 0        # leading blocks of the block table known to be named in the pool

    @staticmethod
    def seed_for(model_seed_bytes: bytes, salt: str = "") -> bytes:
        return model_seed_bytes if not salt else model_seed(model_seed_bytes.hex(), salt)

    def content_end(self, seq, i: int, block_size: int) -> int:
        """Where block i's content ends: its own end, or the end of a segment it holds part of."""
        end = (i + 1) * block_size
        for a, z in seq.segments:
            if a < end < z:
                end = z
        return end

    def name(self, seq, i: int, block_size: int) -> bytes:
        """Block i's name (the blocks before it named first)."""
        names = self.names
        while len(names) <= i:
            j = len(names)
            start, end = j * block_size, (j + 1) * block_size
            extra = content_bytes(seq, start, end)
            stop = self.content_end(seq, j, block_size)
            if stop > end:  # a segment runs on: its rest is this block's content too
                extra += token_bytes(seq.token_ids[end:stop]) + content_bytes(seq, end, stop)
            names.append(block_hash(names[-1] if names else self.seed, token_bytes(seq.token_ids[start:end]), extra))
        return names[i]

    def iter_names(self, seq, count: int, block_size: int) -> Iterator[bytes]:
        """Names of blocks 0 .. count - 1, computed as they are read."""
        for i in range(count):
            yield self.name(seq, i, block_size)
