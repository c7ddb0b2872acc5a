"""Byte-level attacks on the wire format: random bytes, truncated and bit-flipped valid
messages, and hand-made framing lies (a length prefix far past the message's end, a
field repeated thousands of times). Deterministic for a given `random.Random`.

    calls = mutated_calls(random.Random(0), seeds(), 600)
"""
from __future__ import annotations

import random

from bench.fuzz_rpcs import FuzzCall, Rpc

LARGE_BYTES = (1 << 20, 8 << 20)  # the range of a "large" random message


def random_bytes(rng: random.Random, large: bool = False) -> bytes:
    if large:
        return rng.randbytes(rng.randrange(*LARGE_BYTES))
    return rng.randbytes(rng.choice((0, 1, 2, 3, rng.randrange(4, 64), rng.randrange(64, 4096))))


def truncated(rng: random.Random, msg: bytes) -> bytes:
    return msg[:rng.randrange(len(msg))] if msg else msg


def bit_flipped(rng: random.Random, msg: bytes) -> bytes:
    if not msg:
        return bytes([rng.randrange(256)])
    out = bytearray(msg)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def framing_lie(rng: random.Random, msg: bytes) -> bytes:
    """A length-delimited field whose length says far more than the message holds, a
    tag with an invalid wire type, or one field repeated many times."""
    field = rng.randrange(1, 9)
    choice = rng.randrange(3)
    if choice == 0:
        return msg + _varint(field << 3 | 2) + _varint(rng.choice((1 << 20, 1 << 31, (1 << 63) - 1))) + b"x"
    if choice == 1:
        return msg + _varint(field << 3 | rng.choice((6, 7)))
    return msg + (_varint(field << 3 | 0) + _varint(rng.randrange(1 << 63))) * rng.randrange(1000, 20000)


def mutate(rng: random.Random, payload: tuple[bytes, ...]) -> tuple[str, tuple[bytes, ...]]:
    """(origin, mutated payload): one message of the payload attacked, the rest kept."""
    i = rng.randrange(len(payload))
    kind = rng.choices(("truncated", "bitflip", "framing", "random", "large"), (3, 4, 2, 2, 0.3))[0]
    if kind == "truncated":
        new = truncated(rng, payload[i])
    elif kind == "bitflip":
        new = bit_flipped(rng, payload[i])
    elif kind == "framing":
        new = framing_lie(rng, payload[i])
    else:
        new = random_bytes(rng, large=kind == "large")
    return kind, payload[:i] + (new,) + payload[i + 1:]


def mutated_calls(rng: random.Random, seeds: dict[Rpc, list[tuple[bytes, ...]]], n: int) -> list[FuzzCall]:
    """n calls spread over the RPCs of `seeds` (round robin), each a mutated seed."""
    rpcs = list(seeds)
    out = []
    for k in range(n):
        rpc = rpcs[k % len(rpcs)]
        origin, payload = mutate(rng, rng.choice(seeds[rpc]))
        out.append(FuzzCall(rpc, payload, origin))
    return out
