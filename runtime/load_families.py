"""Component.load() keys as Prometheus families: the name, type and help each exports as.

A load dict (`{"kv_blocks_used": 3, "kv_blocks_total": 512, ...}`) is what Describe and
`starmesh status` show, keyed as the engines name things; Prometheus wants a type per
family and names that say it (a counter ends in `_total`, a gauge never does). This
table is where the two meet for the runtime's and the shared engines' keys; a key outside
it (a model's own component's, e.g. a world model's rollouts) is exported as a gauge
`starmesh_<key>`, with `_value` appended when the key ends in a suffix Prometheus
reserves (`_total`, `_count`, `_sum`, `_bucket`).
"""
from __future__ import annotations

from dataclasses import dataclass

RESERVED_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


@dataclass(frozen=True)
class LoadFamily:
    """name: the full metric name (a counter's with its `_total`); kind: gauge | counter."""

    name: str
    kind: str
    help: str

    def __post_init__(self) -> None:
        if self.kind not in ("gauge", "counter"):
            raise ValueError(f"LoadFamily.kind must be gauge or counter, got {self.kind!r}")
        if (self.kind == "counter") != self.name.endswith("_total"):
            raise ValueError(f"LoadFamily.name {self.name!r}: a counter's name ends in _total, a gauge's never")


def _gauge(name: str, help: str) -> LoadFamily:
    return LoadFamily(f"starmesh_{name}", "gauge", help)


def _counter(name: str, help: str) -> LoadFamily:
    return LoadFamily(f"starmesh_{name}_total", "counter", help)


FAMILIES: dict[str, LoadFamily] = {
    "kv_blocks_used": _gauge("kv_blocks_used", "KV-cache blocks in use"),
    "kv_blocks_total": _gauge("kv_blocks_capacity", "KV-cache blocks in the pool"),
    "num_waiting": _gauge("requests_waiting", "requests waiting for KV blocks or a batch slot"),
    "num_running": _gauge("requests_running", "requests in the running batch"),
    "num_parked": _gauge("requests_parked", "requests parked until their input arrives"),
    "queued": _gauge("work_items_queued", "work items queued for the stateless engine"),
    # K/V reuse (engine cache_stats): prefix cache and kept contexts (docs/kv-reuse.md)
    "prefix_cache_enabled": _gauge("prefix_cache_enabled", "1 when the engine reuses cached KV blocks, else 0"),
    "kv_blocks_free": _gauge("kv_blocks_free", "KV blocks free or held only by the cache (evictable)"),
    "kv_blocks_cached": _gauge("kv_blocks_cached", "full KV blocks named for reuse, referenced or not"),
    "kv_blocks_evicted_total": _counter("kv_blocks_evicted", "cached KV blocks evicted to make room"),
    "kv_blocks_copied_total": _counter("kv_blocks_copied", "shared KV blocks copied before a write"),
    "prefix_lookup_tokens_total": _counter("prefix_lookup_tokens", "prompt tokens looked up in the prefix cache"),
    "prefix_hit_tokens_total": _counter("prefix_hit_tokens", "prompt tokens whose KV came from the cache"),
    "prefix_hit_rate": _gauge("prefix_hit_rate", "hit tokens over looked-up tokens so far"),
    "prompt_tokens_computed_total": _counter("prompt_tokens_computed", "prompt tokens the engine computed"),
    "contexts": _gauge("contexts_kept", "named KV contexts kept for later requests"),
    "context_blocks": _gauge("context_blocks", "KV blocks the kept contexts hold"),
    "contexts_kept_total": _counter("contexts_kept", "contexts kept"),
    "contexts_dropped_total": _counter("contexts_dropped", "kept contexts dropped by TTL or limits"),
    "lockstep_rounds": _counter("lockstep_rounds", "lockstep rounds stepped"),
    "lockstep_units": _counter("lockstep_units", "work units stepped in lockstep rounds"),
    "lockstep_padding_units": _counter("lockstep_padding_units", "padding units stepped to keep ranks in lockstep"),
    "lockstep_forwards": _counter("lockstep_forwards", "transformer forwards of lockstep rounds"),
    "lockstep_padding_forwards": _counter("lockstep_padding_forwards", "forwards run only as padding"),
    "lockstep_queued_units": _gauge("lockstep_queued_units", "units waiting for the next lockstep round"),
    "lockstep_broken": _gauge("lockstep_broken", "1 when the lockstep group is broken, else 0"),
    "dlo_rank": _gauge("dlo_rank", "this member's rank in its dlo_group"),
    "dlo_world": _gauge("dlo_world_size", "members of this member's dlo_group"),
    "dlo_allgather": _gauge("dlo_allgather", "1 when offloaded layers are all-gathered across the group, else 0"),
}


def load_family(key: str) -> LoadFamily:
    """The family a load key exports as (module docstring)."""
    family = FAMILIES.get(key)
    if family is not None:
        return family
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in key.lower())
    if name.endswith(RESERVED_SUFFIXES):
        name += "_value"
    return _gauge(name, f"component load: {key}")
