"""Backpressure inside a service: a run whose output credit is spent, or whose routed
edge's window is full, is parked in its component; a Credit item (or the route's
credit) resumes it. Only that run waits: the stream and the other requests on it go on
(buffers are bounded, never the whole stream)."""
from __future__ import annotations

import logging

from runtime.items import Credit
from runtime.request_table import RequestTable

log = logging.getLogger(__name__)


class CreditGate:
    def __init__(self, table: RequestTable, component) -> None:
        self.table = table
        self.component = component
        self.can_park = hasattr(component, "park") and hasattr(component, "resume")

    def spend(self, ports, found) -> None:
        """One item per output port leaves; park the run when a limited port hits 0.
        ports: the output's port names (its tensors); found: the output's (key, run) from
        RequestTable.run_of (None: no open run)."""
        if found is None or not found[1].credits:
            return
        key, run = found
        for port in ports:
            if port in run.credits:
                run.credits[port] -= 1
        self._sync(key, run)

    def grant(self, item: Credit) -> None:
        key = (item.request_id, item.node, item.iteration)
        run = self.table.runs.get(key)
        if run is None or item.port not in run.credits:
            return  # the run ended meanwhile, or that port is not limited
        run.credits[item.port] += item.amount
        self._sync(key, run)

    def block(self, key) -> None:
        """The run's routed edge has no room left in its window."""
        run = self.table.runs.get(key)
        if run is not None:
            run.is_blocked = True
            self._sync(key, run)

    def unblock(self, key) -> None:
        run = self.table.runs.get(key)
        if run is not None and run.is_blocked:
            run.is_blocked = False
            self._sync(key, run)

    def _sync(self, key, run) -> None:
        must_wait = not run.has_credit or run.is_blocked
        if must_wait and not run.is_parked and self.can_park:
            run.is_parked = True
            self.component.park(*key)
        elif run.is_parked and not must_wait:
            run.is_parked = False
            self.component.resume(*key)
