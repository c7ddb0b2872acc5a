"""A DiT replica in a dlo_group: AllGather offload over the group, forwards in lockstep.

`starmesh serve dit --offload use_allgather=true --dlo-group HOST:PORT --dlo-rank R
--dlo-world W` (the launcher derives the flags from the deployment's `dlo_groups`).
At load the replica joins the group's process groups (engine.offload.group), then
enables offload with AllGather over it: each rank keeps 1/world of every block. Its
denoising branches and the conductor's padding units (LOCKSTEP_PAD) run in lockstep
rounds (services.dit.lockstep); init_latent and combine need no peer and run on the
ordinary engine. The fused denoise_loop is refused: it runs both branches of every step
here, with no counterpart on the other ranks.

Teardown order (close): no more rounds, then the offload backend is disabled
(synchronizes the copy thread's pending gather, removes hooks, closes mappings), then
the process groups are destroyed.
"""
from __future__ import annotations

import logging
from typing import Any

from engine.offload.group import DloGroup, DloGroupConfig
from engine.slack_policy import SlackPolicy
from engine.stateless_engine import StatelessConfig, WorkItem, WorkResult
from services.dit.denoiser import DitComponent, DitConfig
from services.dit.hook import Denoiser, DitHook
from services.dit.lockstep import Lockstep, Unit
from runtime.items import LOCKSTEP_PAD, NodeDone, NodeError, OpenNode, OutboundEvent
from core.errors import InvalidArgument

log = logging.getLogger(__name__)


def _allgather_config(offload, config: DloGroupConfig):
    from engine.offload.loading import effective_config

    offload = effective_config(offload, "stateless")
    if offload is None or not offload.use_allgather:
        raise InvalidArgument(f"{config.where}: a dlo_group member needs offload.use_allgather "
                              "(--offload use_allgather=true): the group exists to AllGather its blocks")
    return offload


class GroupMemberDit(DitComponent):
    def __init__(self, model: Denoiser, config: StatelessConfig, group: DloGroup) -> None:
        super().__init__(model, config)
        self.group = group
        # the runs that are transformer forwards (one per branch node) and the conductor's padding
        self.lockstep_nodes = (*self.branch_of, LOCKSTEP_PAD)
        self.nodes = (*self.nodes, LOCKSTEP_PAD)
        self.lockstep = Lockstep(group, config.max_batch_size, self._run_batch, model.pad_forward)

    @classmethod
    def join(cls, config: DitConfig, hook: DitHook, offload, group_config: DloGroupConfig) -> "GroupMemberDit":
        """Joins the group (the rendezvous waits for every rank), loads the transformer
        through the model's hook and enables AllGather offload over the group (the ranks
        first agree on the plan)."""
        offload = _allgather_config(offload, group_config)
        group = DloGroup.open(group_config, config.device)
        try:
            model = hook.load(config.checkpoint, config.dtype, config.device, offload, group.transfer)
        except BaseException:
            group.close()
            raise
        # Arrival order, never a clock: every rank must form the same batches in the same order.
        return cls(model, StatelessConfig(max_batch_size=config.max_batch_size, policy=SlackPolicy("fcfs")), group)

    # ---- units ------------------------------------------------------------------------

    def open(self, item: OpenNode, inputs: dict[str, Any]) -> None:
        if item.node == "denoise_loop":
            raise InvalidArgument(f"open.node denoise_loop: this replica is in {self.lockstep.where} and steps in "
                                  "lockstep with its peers; the fused loop has no counterpart there (use the "
                                  "conductor-driven loop, fused=False)")
        if item.node not in self.lockstep_nodes:
            return super().open(item, inputs)
        self.lockstep.check_usable()
        unit = Unit(item)
        self.lockstep.add(unit, is_pad=item.node == LOCKSTEP_PAD)  # counted before anything can fail
        if item.node != LOCKSTEP_PAD:
            key, payload = self.prepare(item, inputs)  # a bad branch stays a dead unit
            unit.item = WorkItem(item.request_id, key, payload, tag=item)

    def refused(self, item: OpenNode) -> None:
        """The service refused the run before open (draining, a bad reference): its peers'
        units are counted, so it still takes its place, dead."""
        if item.node in self.lockstep_nodes and self.lockstep.broken is None:
            self.lockstep.add(Unit(item, is_cancelled=True), is_pad=item.node == LOCKSTEP_PAD)

    def cancel(self, request_id: str) -> None:
        super().cancel(request_id)
        self.lockstep.cancel(request_id)

    def has_work(self) -> bool:
        return self.engine.has_work() or self.lockstep.has_units

    def step(self) -> list[OutboundEvent]:
        events = super().step() if self.engine.has_work() else []
        if self.lockstep.has_units:
            events += [ev for result in self.lockstep.round() for ev in self._unit_events(*result)]
        return events

    def _unit_events(self, unit: Unit, output: Any, error: BaseException | None) -> list[OutboundEvent]:
        item = unit.open
        if unit.is_cancelled:
            return []  # the request is gone here (or was failed when its run was refused)
        if item.node == LOCKSTEP_PAD:
            if error is not None:
                return [NodeError(item.request_id, item.node, "UNAVAILABLE", str(error), item.iteration)]
            return [NodeDone(item.request_id, item.node, iteration=item.iteration)]
        if unit.item is None:
            return []  # refused at prepare: its NodeError is out already
        return self.events_for(WorkResult(unit.item, output, error))

    # ---- health, load, teardown -------------------------------------------------------

    def ready(self) -> bool:
        return super().ready() and self.lockstep.broken is None

    def load(self) -> dict:
        backend = self.model.offload_backend
        kind = backend.transfer.kind if backend is not None else ""
        return {**super().load(), **self.lockstep.load(), "dlo_rank": self.group.config.rank,
                "dlo_world": self.group.config.world_size, "dlo_allgather": int(kind == "allgather")}

    def close(self) -> None:
        if self.is_closed:
            return
        super().close()
        if not self.lockstep.close(self.group.config.timeout_s + 5):
            log.error("%s: a lockstep round is still running; the process groups are left to process exit",
                      self.lockstep.where)
            return
        backend = self.model.offload_backend
        if backend is not None:
            backend.disable()  # before the process group goes: it synchronizes the pending gather
        self.group.close()
