"""Backpressure inside a service: a run whose output credit is spent is parked in its
component; a Credit item resumes it. Only that run waits: the stream and the other
requests on it go on (buffers are bounded, never the whole stream)."""
from __future__ import annotations

import logging

from runtime.items import Credit, NodeOutput
from runtime.request_table import RequestTable

log = logging.getLogger(__name__)


class CreditGate:
    def __init__(self, table: RequestTable, component) -> None:
        self.table = table
        self.component = component
        self.can_park = hasattr(component, "park") and hasattr(component, "resume")

    def spend(self, ev: NodeOutput) -> None:
        """One item per output port leaves; park the run when a limited port hits 0."""
        found = self.table.run_of(ev.request_id, ev.node, ev.iteration)
        if found is None or not found[1].credits:
            return
        key, run = found
        for port in ev.tensors:
            if port in run.credits:
                run.credits[port] -= 1
        if not run.has_credit and not run.is_parked and self.can_park:
            run.is_parked = True
            self.component.park(*key)

    def grant(self, item: Credit) -> None:
        run = self.table.runs.get((item.request_id, item.node, item.iteration))
        if run is None or item.port not in run.credits:
            return  # the run ended meanwhile, or that port is not limited
        run.credits[item.port] += item.amount
        if run.is_parked and run.has_credit:
            run.is_parked = False
            self.component.resume(item.request_id, item.node, item.iteration)
