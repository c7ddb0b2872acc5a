"""What a KV-cache engine reports as its load (Describe, `starmesh status`, Prometheus
through runtime/load_families.py): its pool and queues, and how much K/V it reused."""
from __future__ import annotations


def scheduler_load(scheduler) -> dict[str, int]:
    pool = scheduler.pool
    return {"kv_blocks_used": pool.num_used_blocks, "kv_blocks_total": pool.total,
            "num_waiting": scheduler.num_waiting, "num_running": scheduler.num_running,
            "num_parked": scheduler.num_parked}


def engine_load(engine) -> dict[str, float]:
    """scheduler_load plus the engine's prefix-cache and context figures (cache_stats)."""
    return {**engine.cache_stats(), **scheduler_load(engine.scheduler)}
