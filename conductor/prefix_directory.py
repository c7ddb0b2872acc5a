"""Which replica holds the longest cached prefix of a prompt, without asking any.

Each replica with a prefix cache publishes a bounded summary of the block names it holds
(its seed, block size and up to MAX_NAMES names, most useful first) with the metadata of
its prompt outputs (services/kept_context.py); the conductor keeps the latest per
replica. For a new request that names no context, `longest` computes the names of its
prompt's full blocks as the replica's engine would (core/block_hash.chain_hashes: plain
text only; media and fed rows change names, so such prompts simply match nothing) and
returns the replicas whose cache covers most of them. A summary can be stale (blocks
evicted since): a wrong guess costs a cold prefill, never a wrong answer.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from core.block_hash import chain_hashes, matched_blocks

MAX_NAMES = 256          # names kept per replica (what a summary may carry)
MAX_PROMPT_BLOCKS = 256  # leading blocks of a prompt compared (a longer match is as good)


class PrefixDirectory:
    def __init__(self) -> None:
        self._held: dict[str, tuple[bytes, int, frozenset[bytes]]] = {}  # endpoint -> seed, block size, names

    def publish(self, endpoint: str, summary: Mapping[str, Any]) -> None:
        """A replica's summary: {"seed": hex, "block_size": n, "names": [hex, ...]}; a
        malformed one is ignored (it only ever steers a choice)."""
        try:
            seed, size = bytes.fromhex(summary["seed"]), int(summary["block_size"])
            names = frozenset(bytes.fromhex(n) for n in list(summary["names"])[:MAX_NAMES])
        except (KeyError, TypeError, ValueError):
            return
        if size > 0:
            self._held[endpoint] = (seed, size, names)

    def forget(self, endpoint: str) -> None:
        self._held.pop(endpoint, None)

    def __len__(self) -> int:
        """Replicas whose summary is held."""
        return len(self._held)

    def longest(self, prompt_ids: Sequence[int]) -> frozenset[str]:
        """The replicas holding the most leading blocks of the prompt (none when no
        replica holds its first block)."""
        best, chains = 0, {}
        matched: dict[str, int] = {}
        for endpoint, (seed, size, names) in self._held.items():
            key = (seed, size)
            if key not in chains:
                chains[key] = chain_hashes(prompt_ids, size, seed, MAX_PROMPT_BLOCKS)
            matched[endpoint] = n = matched_blocks(chains[key], names)
            best = max(best, n)
        return frozenset(e for e, n in matched.items() if n == best) if best else frozenset()

