"""One rank of the AllGather test: `python -m tests.engine.offload.allgather_rank RANK INIT_FILE`.
Prints one JSON line of findings (test_allgather.py asserts on them)."""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from engine.offload import OffloadBackend, OffloadConfig
from engine.offload.allgather import shard_bytes
from tests.engine.offload.stack import Stack, inputs
from core.errors import InvalidArgument

CONFIG = OffloadConfig(enabled=True, use_allgather=True)


def run(rank: int) -> dict:
    expected = [Stack()(inputs(s)) for s in range(3)]
    model = Stack()
    backend = OffloadBackend.enable(model, CONFIG)
    equal = all(torch.equal(e, model(inputs(s))) for s, e in enumerate(expected))
    out = {"kind": backend.transfer.kind, "equal": equal}
    shards, blocks = backend.transfer.shards, backend.plan.blocks
    out["shard_sizes_ok"] = all(s.numel() == shard_bytes(b.nbytes, 2) for s, b in zip(shards, blocks))
    pad = [s[max(0, b.nbytes - rank * s.numel()):] for s, b in zip(shards, blocks)]
    out["padding"] = [int(p.numel()) for p in pad]
    out["padding_zero"] = all(bool((p == 0).all()) for p in pad)
    out["host_bytes"] = sum(s.numel() for s in shards)
    out["streamed_bytes"] = backend.plan.streamed_bytes
    out["misses"] = backend.stats.misses
    backend.disable()  # before the process group goes
    other = Stack(hidden=37 + rank)
    try:
        OffloadBackend.enable(other, CONFIG)
        out["mismatch"] = ""
    except InvalidArgument as e:
        out["mismatch"] = str(e)
    out["intact_after_mismatch"] = all(p.numel() > 0 for p in other.parameters())  # refused before any change
    return out


def main() -> None:
    rank, init_file = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        print(json.dumps(run(rank)), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
