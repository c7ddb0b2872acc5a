"""AllGather across two lockstep gloo ranks: each keeps half of every block (zero-padded),
outputs equal resident execution bitwise, and ranks with different plans are refused."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from engine.offload.allgather import make_shard, shard_bytes

pytestmark = pytest.mark.timeout(180)


def test_shards_are_zero_padded_and_cover_the_block():
    full = torch.arange(1, 131, dtype=torch.uint8)  # 130 bytes over 3 ranks: 64-byte shards
    size = shard_bytes(full.numel(), 3)
    shards = [make_shard(full, r, 3, torch.full((size,), 7, dtype=torch.uint8)) for r in range(3)]
    assert size == 64 and torch.equal(torch.cat(shards)[:130], full)
    assert not torch.cat(shards)[130:].any()


def test_two_gloo_ranks_gather_every_block(tmp_path):
    init = str(tmp_path / "init")
    cmd = [sys.executable, "-m", "tests.engine.offload.allgather_rank"]
    procs = [subprocess.Popen([*cmd, str(r), init], stdout=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=150)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    reports = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    for rank, r in enumerate(reports):
        assert r["kind"] == "allgather" and r["equal"] and r["misses"] == 0
        assert r["shard_sizes_ok"] and r["padding_zero"]
        assert r["host_bytes"] <= r["streamed_bytes"] / 2 + 64 * 5  # half of every block, plus padding
        assert "ranks disagree on the offload plan" in r["mismatch"] and r["intact_after_mismatch"]
    assert reports[0]["padding"] == [0] * 5 and min(reports[1]["padding"]) > 0  # the remainder is on rank 1
