"""The chain hash that names a full block of KV: what a prefix cache looks blocks up by.

Block i of a prompt is named by hashing the name of block i - 1 (the seed for block 0)
with the block's token ids and `extra`, the bytes of everything else its K/V depend on
(an engine adds embedding rows, media and rope positions there). Two prompts therefore
share block i's name only if they agree on every token up to its end.

Pure standard library and deterministic across processes (blake2b, not Python's salted
hash), so a router can compute the names of a plain-text prompt's blocks and compare
them with what a replica says it holds. 16-byte names: collisions are out of reach.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Container, Iterable, Sequence

DIGEST = 16


def model_seed(*parts: str) -> bytes:
    """The seed of every chain of one model (and adapter, and salt): its parts, in order."""
    h = hashlib.blake2b(digest_size=DIGEST, person=b"starmesh-seed")
    for part in parts:
        data = part.encode()
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.digest()


def token_bytes(token_ids: Sequence[int]) -> bytes:
    """Little-endian int64 of each id: the byte form block_hash reads."""
    return struct.pack(f"<{len(token_ids)}q", *token_ids)


def block_hash(parent: bytes, tokens: bytes, extra: bytes = b"") -> bytes:
    """The name of a block: its parent's name (or the seed), its token_bytes, and extra."""
    h = hashlib.blake2b(parent, digest_size=DIGEST)
    h.update(struct.pack("<Q", len(tokens)))
    h.update(tokens)
    if extra:
        h.update(extra)
    return h.digest()


def chain_hashes(token_ids: Sequence[int], block_size: int, seed: bytes,
                 max_blocks: int | None = None) -> list[bytes]:
    """The names of the full blocks of a plain-text prompt (no embedding rows or media):
    what an engine chaining from `seed` registers for the same ids."""
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    count = len(token_ids) // block_size
    if max_blocks is not None:
        count = min(count, max_blocks)
    data = token_bytes(token_ids[:count * block_size])
    step = 8 * block_size
    out, parent = [], seed
    for i in range(count):
        parent = block_hash(parent, data[i * step:(i + 1) * step])
        out.append(parent)
    return out


def matched_blocks(hashes: Iterable[bytes], held: Container[bytes]) -> int:
    """How many leading names of a chain `held` contains (the first miss ends the run)."""
    n = 0
    for h in hashes:
        if h not in held:
            break
        n += 1
    return n
