"""What a KV-cache engine reports as its load (Describe, `starmesh status`)."""
from __future__ import annotations


def scheduler_load(scheduler) -> dict[str, int]:
    pool = scheduler.pool
    return {"kv_blocks_used": pool.num_used_blocks, "kv_blocks_total": pool.total,
            "num_waiting": scheduler.num_waiting, "num_running": scheduler.num_running,
            "num_parked": scheduler.num_parked}
