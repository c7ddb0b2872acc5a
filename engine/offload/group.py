"""A dlo_group member's process groups: the AllGather transfer group and the lockstep
control group (docs/offload.md, "dlo_group").

    group = DloGroup.open(DloGroupConfig("10.0.0.1:29500", rank=0, world_size=2), device)
    backend = OffloadBackend.enable(model, config, group=group.transfer)   # shards + AllGather
    n = group.agree(n, "min")     # the lockstep control collectives (ints, on CPU)
    backend.disable()             # first: synchronizes the copy thread's gathers
    group.close()                 # then: destroys the process groups

One group per process: the default torch.distributed group (TCP rendezvous at
`address`, rank 0 listens there) carries the block gathers (gloo on CPU, NCCL on CUDA),
on the offload copy thread. The agreements run on the engine thread, so they get a
group of their own (always gloo): two threads issuing collectives on one group could
order them differently on different ranks, and collectives pair up by order. A group of
one opens nothing and does no collective. Every collective is bounded by `timeout_s`;
a failure (a peer down, or sent a different number of steps) is a LockstepError naming
the group, after which the group is unusable (gloo's state is undefined past a timeout).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta

from core.errors import InvalidArgument, Unavailable

log = logging.getLogger("engine.offload")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class LockstepError(Unavailable):
    """A lockstep collective failed: the group is broken for good on this rank."""


@dataclass(frozen=True)
class DloGroupConfig:
    address: str           # host:port of the rendezvous (rank 0 binds it)
    rank: int
    world_size: int
    name: str = "dlo"      # for messages and logs
    timeout_s: float = 60.0  # every collective (and the rendezvous) gives up after this

    def __post_init__(self) -> None:
        host, sep, port = self.address.rpartition(":")
        if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise InvalidArgument(f"dlo_group.address {self.address!r} is not 'host:port'")
        for field in ("rank", "world_size"):
            if isinstance(getattr(self, field), bool) or not isinstance(getattr(self, field), int):
                raise InvalidArgument(f"dlo_group.{field} must be an int, got {getattr(self, field)!r}")
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise InvalidArgument(f"dlo_group.rank ({self.rank}) must be in [0, world_size) with world_size "
                                  f"({self.world_size}) >= 1")
        if not _NAME.match(self.name):
            raise InvalidArgument(f"dlo_group.name {self.name!r} is not an identifier")
        if not self.timeout_s > 0:
            raise InvalidArgument(f"dlo_group.timeout_s must be > 0, got {self.timeout_s}")

    @property
    def where(self) -> str:
        return f"dlo_group {self.name!r} rank {self.rank}/{self.world_size}"


_process_group_config: DloGroupConfig | None = None


def set_process_group_config(config: DloGroupConfig | None) -> None:
    """The group of the service this process hosts (`starmesh serve --dlo-group ...`)."""
    global _process_group_config
    _process_group_config = config


def process_group_config() -> DloGroupConfig | None:
    return _process_group_config


class DloGroup:
    def __init__(self, config: DloGroupConfig, transfer=None, control=None) -> None:
        self.config = config
        self.transfer = transfer  # the process group the AllGather transfer uses (None: a group of one)
        self.control = control    # the gloo group of the lockstep agreements
        self.is_open = transfer is not None

    @classmethod
    def open(cls, config: DloGroupConfig, device: str = "cpu") -> "DloGroup":
        """Joins the rendezvous (blocks until every rank arrived, at most timeout_s)."""
        if config.world_size == 1:
            return cls(config)
        import torch
        import torch.distributed as dist

        if dist.is_initialized():
            raise InvalidArgument(f"{config.where}: this process already has a process group (one per process)")
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(torch.device(device))  # NCCL collectives run on the current device
        timeout = timedelta(seconds=config.timeout_s)
        try:
            dist.init_process_group(backend, init_method=f"tcp://{config.address}", rank=config.rank,
                                    world_size=config.world_size, timeout=timeout)
            control = dist.new_group(backend="gloo", timeout=timeout)
        except Exception as e:  # noqa: BLE001 - named, with the cause
            if dist.is_initialized():
                dist.destroy_process_group()
            raise LockstepError(f"{config.where}: the rendezvous at {config.address} failed: {e}") from e
        log.info("%s: joined at %s (%s transfer, gloo control)", config.where, config.address, backend)
        return cls(config, dist.group.WORLD, control)

    def agree(self, value: int, op: str) -> int:
        """The min or max of `value` over the group's ranks (every rank must call it)."""
        if not self.is_open:
            return value
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64)
        try:
            dist.all_reduce(t, op={"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op], group=self.control)
        except Exception as e:  # noqa: BLE001 - gloo raises RuntimeError on timeouts and peer loss
            raise LockstepError(f"{self.config.where}: the lockstep agreement failed ({e}); a peer rank is "
                                f"down, timed out ({self.config.timeout_s:g} s), or was sent a different "
                                "number of steps") from e
        return int(t.item())

    def close(self) -> None:
        """Destroys the process groups; the offload backend must be disabled before."""
        if not self.is_open:
            return
        import torch.distributed as dist

        self.is_open = False
        if dist.is_initialized():
            dist.destroy_process_group()
        log.info("%s: process group destroyed", self.config.where)
