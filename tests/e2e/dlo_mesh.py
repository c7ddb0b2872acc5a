"""An SD3 mesh whose two dit replicas form a dlo_group (AllGather offload, lockstep), for
tests/e2e/test_dlo_group.py.

    rank0, rank1   `starmesh serve dit --offload use_allgather=true --dlo-group ...` (the
                   flags cluster.dlo_groups.member_args gives a deployment's members), two
                   processes gathering each other's block shards over gloo
    text, vae      in this process (services on threads)
    conductor      in this process, serving two placements with lockstep group [rank0, rank1]:
      "sd3_dlo"    CFG-parallel: denoise_cond on rank0, denoise_uncond on rank1
      "sd3_rank0"  every dit node on rank0: rank1 only gets padding units

Every engine runs batches of one (max_batch_size=1), so each image is bitwise the one a
resident single replica computes for the request alone (batching changes float sums).
"""
from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cluster.dlo_groups import member_args
from conductor.dlo_group_spec import DloGroupSpec
from cluster.launcher import free_port
from conductor.service import ConductorService
from pipelines.sd3.model import served_model
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from cluster.registry import build_component
from tests.fixtures import registry, tiny_sd3
from tests.fixtures.services import describe, start_in_process

HOST_ID = "test-host"  # the in-process services' (start_in_process): one host, tensors by shm
TIMEOUT_S = 30  # the group's collectives: long enough for a loaded 2-core machine's start skew


@dataclass
class DloMesh:
    conductor: BackgroundServer
    ranks: list[ServiceProcess]
    local: list[BackgroundServer]
    logs: list[list[str]] = field(default_factory=list)

    @classmethod
    def start(cls) -> "DloMesh":
        ckpt = tiny_sd3.checkpoint()
        group = DloGroupSpec("cfg", f"127.0.0.1:{free_port()}", 2, ("rank0", "rank1"), TIMEOUT_S)
        logs: list[list[str]] = [[], []]
        lock = threading.Lock()

        def keep(r: int):
            def log(line: str) -> None:
                with lock:
                    logs[r].append(line)
            return log

        ranks = [ServiceProcess("dit", ["--checkpoint", ckpt, "--option", "max_batch_size=1", "--offload",
                                        "use_allgather=true", "--host-id", HOST_ID,
                                        *member_args({"cfg": group}, f"rank{r}")],
                                name=f"dlo-rank{r}", start_timeout_s=120, log=keep(r)) for r in range(2)]
        local: list[BackgroundServer] = []
        try:
            with ThreadPoolExecutor(2) as pool:  # both load at once: they meet at the rendezvous
                list(pool.map(ServiceProcess.start, ranks))
            for proc in ranks:
                registry.register(proc.address, describe(proc.address).arena)
            local = [start_in_process(build_component(name, checkpoint=ckpt, max_batch_size=1))
                     for name in ("text_encoder", "vae")]
        except BaseException:
            cls(None, ranks, local).stop()
            print("\n".join(line for log in logs for line in log[-30:]), file=sys.stderr)  # why a rank failed
            raise
        text, vae = (s.address for s in local)
        r0, r1 = (p.address for p in ranks)
        models = [served_model("sd3_dlo", text, r0, vae, dit_uncond=r1, dlo_group=(r0, r1)),
                  served_model("sd3_rank0", text, r0, vae, dlo_group=(r0, r1))]
        conductor = BackgroundServer(ConductorService(models))
        conductor.start()
        return cls(conductor, ranks, local, logs)

    @property
    def address(self) -> str:
        return self.conductor.address

    def load(self, rank: int) -> dict[str, float]:
        return dict(describe(self.ranks[rank].address).load)

    def open_requests(self) -> list[int]:
        return [describe(p.address).num_open_requests for p in self.ranks]

    def stop(self) -> None:
        if self.conductor is not None:
            self.conductor.stop()
        for server in self.local:
            server.stop()
        for proc in self.ranks:  # SIGTERM both first: each drains, disables offload, then leaves the group
            if proc.proc is not None:
                registry.unregister(proc.address)
                proc.terminate()
        for proc in self.ranks:
            if proc.proc is not None:
                proc.stop(timeout_s=TIMEOUT_S + 15)
