"""The backbone's text decodes in flight (`answer`, `plan` runs), stepped together.

Each component step feeds every active decode its last id in one forward
(engine/models/bagel/text_decode.py): concurrent understanding requests share their
decode steps, and a run joins at the next step after it opens and leaves at the step
its decode ends. A step whose batched forward fails is retried decode by decode, so
one bad decode fails only its own run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.models.bagel.params import BagelParams
from engine.models.bagel.text_decode import TextDecode, decode_step
from runtime.items import OpenNode


@dataclass(eq=False)
class DecodeRun:
    item: OpenNode
    params: BagelParams
    decode: TextDecode | None  # None: the run has nothing to decode (a plan without think)

    @property
    def live(self) -> bool:
        return self.decode is not None and not self.decode.done


class Decodes:
    def __init__(self, nodes) -> None:
        """nodes: services.bagel.model_nodes.BagelNodes (starts and finishes each run's decode)."""
        self.nodes = nodes
        self.runs: list[DecodeRun] = []
        self.num_steps = 0  # forwards run (rows decoded / num_steps = the mean batch)

    def __len__(self) -> int:
        return len(self.runs)

    def add(self, item: OpenNode, params: BagelParams) -> None:
        """Starts the run's decode (NotFound when its request has no contexts here)."""
        self.runs.append(DecodeRun(item, params, self.nodes.start_decode(item, params)))

    def step(self) -> list[tuple[OpenNode, Any, BaseException | None]]:
        """One token for every live decode; -> (run, outputs, None) for each run that
        ended, (run, None, error) for each that failed."""
        failed = self._advance([r for r in self.runs if r.live])
        ended = []
        for run in [r for r in self.runs if id(r) in failed or not r.live]:
            self.runs.remove(run)
            error = failed.get(id(run))
            if error is None:
                try:
                    ended.append((run.item, self.nodes.finish_decode(run.item, run.params, run.decode), None))
                    continue
                except Exception as e:  # noqa: BLE001 - its own run fails
                    error = e
            self.nodes.abandon_decode(run.item, run.decode)
            ended.append((run.item, None, error))
        return ended

    def _advance(self, live: list[DecodeRun]) -> dict[int, BaseException]:
        if not live:
            return {}
        self.num_steps += 1
        try:
            decode_step(self.nodes.kv, [r.decode for r in live])
            return {}
        except Exception as e:  # noqa: BLE001 - isolate the failing decode below
            if len(live) == 1:
                return {id(live[0]): e}
        failed = {}
        for run in live:
            try:
                decode_step(self.nodes.kv, [run.decode])
            except Exception as e:  # noqa: BLE001
                failed[id(run)] = e
        return failed

    def cancel(self, request_id: str) -> None:
        """The request's runs go (before its contexts do)."""
        for run in [r for r in self.runs if r.item.request_id == request_id]:
            self.runs.remove(run)
            self.nodes.abandon_decode(run.item, run.decode)

    def clear(self) -> None:
        for run in list(self.runs):
            self.cancel(run.item.request_id)
