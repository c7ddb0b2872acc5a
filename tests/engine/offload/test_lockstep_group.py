"""Lockstep rounds over a real gloo dlo_group of two processes (tests/engine/offload/lockstep_rank.py):
units arriving in different waves, with different batching, padding and cancelled units,
pair up (equal forward counts, padding forwards where a rank had less to run), outputs
equal resident execution bitwise, and a rank left alone fails with an error naming the
group instead of waiting forever."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cluster.launcher import free_port

pytestmark = pytest.mark.timeout(120)


def test_two_ranks_pair_their_forwards_and_a_lonely_rank_fails_clearly():
    cmd = [sys.executable, "-m", "tests.engine.offload.lockstep_rank"]
    address = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([*cmd, str(r), address], stdout=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=100)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    r0, r1 = (json.loads(o.strip().splitlines()[-1]) for o in outs)
    for r in (r0, r1):
        assert r["kind"] == "allgather" and r["equal"] and r["misses"] == 0, r
        assert r["stats"]["units"] == 6
    forwards = [r["stats"]["forwards"] + r["stats"]["padding_forwards"] for r in (r0, r1)]
    assert forwards[0] == forwards[1] == 5, (r0["stats"], r1["stats"])
    # rounds take 1, 2, 1, 2 units (rank 1's waves). Rank 0 batches b+c (one key) where rank 1 has
    # two keys: rank 0 pads once; rank 1 pads its padding unit a and its cancelled unit d.
    assert (r0["stats"]["forwards"], r0["stats"]["padding_forwards"], r0["stats"]["rounds"]) == (4, 1, 4)
    assert (r1["stats"]["forwards"], r1["stats"]["padding_forwards"], r1["stats"]["rounds"]) == (3, 2, 4)
    assert r0["outputs"] == 6 and r1["outputs"] == 3 and r1["stats"]["padding_units"] == 2
    assert "dlo_group 'toy' rank 0/2: the lockstep agreement failed" in r0["late_error"], r0
    assert r0["late_s"] < 10 and "is broken" in r0["refused_after"]
