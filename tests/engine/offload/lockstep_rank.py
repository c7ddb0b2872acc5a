"""One rank of the lockstep test: `python -m tests.engine.offload.lockstep_rank RANK HOST:PORT`.

Both ranks receive 6 units, in different waves and with different work (rank 1 has
padding and cancelled units, and two batch keys), and run lockstep rounds over a toy
stack streaming by AllGather; then rank 1 leaves (disable, then destroy) and rank 0's
next round must fail with a LockstepError naming the group. Prints one JSON line.
"""
from __future__ import annotations

import json
import sys
import time

import torch

from engine.offload import OffloadBackend, OffloadConfig
from engine.offload.group import DloGroup, DloGroupConfig, LockstepError
from engine.stateless_engine import WorkItem
from services.dit.lockstep import Lockstep, Unit
from runtime.items import OpenNode
from tests.engine.offload.stack import Stack, inputs

# rank -> waves of units: (request id, batch key or None for no work, cancelled)
WAVES = {
    0: [[("a", "k", False), ("b", "k", False), ("c", "k", False), ("d", "k", False), ("e", "k", False),
         ("f", "k", False)]],
    1: [[("a", None, False)], [("b", "k", False), ("c", "j", False)], [("d", "k", True)],
        [("e", "k", False), ("f", None, False)]],
}


def make_unit(rid: str, key, cancelled: bool, seed: int) -> Unit:
    item = None if key is None else WorkItem(rid, key, inputs(seed, batch=1))
    return Unit(OpenNode(rid, "denoise_cond"), item, is_cancelled=cancelled)


def scenario(rank: int, lockstep: Lockstep, model, resident) -> dict:
    checks = []

    def run_batch(items):
        x = torch.cat([i.payload for i in items])  # [B, 7]
        y = model(x)
        checks.append(torch.equal(y, resident(x)))  # streamed by AllGather == resident, same batch
        return list(y.split(1))

    lockstep.run_batch = run_batch
    outputs = 0
    for w, wave in enumerate(WAVES[rank]):
        for i, (rid, key, cancelled) in enumerate(wave):
            lockstep.add(make_unit(rid, key, cancelled, 10 * w + i), is_pad=key is None)
        if rank == 1:  # one round per wave: the next wave arrives while rank 0 waits in its round
            time.sleep(0.2)
            outputs += sum(out is not None for _, out, _ in lockstep.round())
    while lockstep.has_units:
        outputs += sum(out is not None for _, out, _ in lockstep.round())
    return {"equal": all(checks), "outputs": outputs, "stats": dict(vars(lockstep.stats))}


def main() -> None:
    rank, address = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    group = DloGroup.open(DloGroupConfig(address, rank, 2, "toy", timeout_s=5))
    model, resident = Stack(), Stack()
    backend = OffloadBackend.enable(model, OffloadConfig(enabled=True, use_allgather=True), group=group.transfer)
    lockstep = Lockstep(group, 2, None, lambda: model(torch.zeros(1, 7)))
    with torch.inference_mode():
        out = scenario(rank, lockstep, model, resident)
        out.update(kind=backend.transfer.kind, misses=backend.stats.misses)
        group.agree(0, "max")  # both are done
        if rank == 1:
            backend.disable()  # before the process group goes
            group.close()
        else:
            time.sleep(0.5)
            lockstep.add(make_unit("late", "k", False, 99))
            t0 = time.perf_counter()
            failed = lockstep.round()
            out["late_error"] = str(failed[0][2]) if failed and failed[0][2] is not None else ""
            out["late_s"] = time.perf_counter() - t0
            try:
                lockstep.check_usable()
                out["refused_after"] = ""
            except LockstepError as e:
                out["refused_after"] = str(e)
            backend.disable()
            group.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
