"""Node `codes`: a loop run inside the LM's service that turns the LM's tokens into SNAC
codes with the reference rule (engine.models.orpheus.audio_codes); it is stateful per
request (the count of accepted codes decides each token's frame position).

open(inputs):  first_token [1], the token prefill produced.
push("token"): the decode loop's tokens [n]; end_of_stream: the LM is done.
outputs:       one output {"codes": int64 [1]} per accepted code at iteration + (k,),
               k the code's stream position, a step's codes returned together (NodeOutputs,
               codes [N]); NodeDone at the run's iteration once the LM
               is done (or the loop's max_iters codes were accepted).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.errors import InvalidArgument
from engine.models.orpheus.audio_codes import AudioCodeCounter
from runtime.items import NodeDone, NodeOutputs, OpenNode

NODE = "codes"


def _check_ids(tokens, port: str) -> None:
    if tokens.dtype.is_floating_point:
        raise InvalidArgument(f"push.tensors[{port}]: token ids must be integers, got {tokens.dtype}")


@dataclass
class CodesRun:
    item: OpenNode
    counter: AudioCodeCounter = field(default_factory=AudioCodeCounter)


class AudioCodesComponent:
    name = "audio_codes"
    nodes = (NODE,)

    def __init__(self) -> None:
        self.runs: dict[str, CodesRun] = {}
        self._events: list = []  # NodeDones (after the codes of the same step)
        self._codes: list[tuple[str, tuple[int, ...], int]] = []  # (request, iteration, code) since the last step

    def open(self, item: OpenNode, inputs) -> None:
        if item.node != NODE:
            raise InvalidArgument(f"open.node {item.node!r}: the audio code node is {NODE!r}")
        first = inputs.get("first_token")
        if first is None or first.dtype.is_floating_point or first.numel() != 1:
            raise InvalidArgument("open.inputs.first_token: one integer token id expected (prefill's token)")
        if item.request_id in self.runs:
            raise InvalidArgument(f"open.request_id {item.request_id!r}: its {NODE} run is already open")
        run = self.runs[item.request_id] = CodesRun(item)
        self._accept(run, first.reshape(-1).tolist())
        if item.stream is None:  # whole-output handoff: every token is here
            self._accept(run, inputs["token"].reshape(-1).tolist() if "token" in inputs else [])
            self._finish(run)

    def push(self, item, tensors) -> None:
        run = self.runs.get(item.request_id)
        if run is None:
            return  # already finished (its max_iters codes): later tokens are not needed
        tokens = tensors.get(item.port, tensors.get("token")) if tensors else None
        if tokens is not None:
            _check_ids(tokens, item.port)
            self._accept(run, tokens.reshape(-1).tolist())
        if item.end_of_stream and item.request_id in self.runs:
            self._finish(run)

    def push_rows(self, batch) -> dict:
        """A step's tokens for every open run in one call (runtime.row_batch): one check
        of the dtype, one list of ids; an entry fails alone."""
        try:
            if batch.rows is not None:
                _check_ids(batch.rows, batch.ports[0])
        except InvalidArgument as e:
            return dict.fromkeys(range(len(batch)), e)
        ids = batch.rows.reshape(batch.rows.shape[0], -1).tolist() if batch.rows is not None else []
        failures = {}
        for i, request_id in enumerate(batch.request_ids):
            run = self.runs.get(request_id)
            if run is None:
                continue  # already finished (its max_iters codes): later tokens are not needed
            try:
                self._accept(run, [t for row in ids[batch.starts[i]:batch.stops[i]] for t in row])
                if batch.ends[i] and request_id in self.runs:
                    self._finish(run)
            except Exception as e:  # noqa: BLE001 - this request's tokens alone
                failures[i] = e
        return failures

    def _accept(self, run: CodesRun, tokens: list[int]) -> None:
        item = run.item
        for token in tokens:
            if item.request_id not in self.runs:
                return
            k = run.counter.num_accepted
            code = run.counter.accept(int(token))
            if code is None:
                continue
            self._codes.append((item.request_id, item.iteration + (k,), code))
            if item.max_iters and run.counter.num_accepted >= item.max_iters:
                self._finish(run)

    def _finish(self, run: CodesRun) -> None:
        self.runs.pop(run.item.request_id, None)
        self._events.append(NodeDone(run.item.request_id, NODE, iteration=run.item.iteration))

    def cancel(self, request_id: str) -> None:
        self.runs.pop(request_id, None)
        self._events = [e for e in self._events if e.request_id != request_id]
        self._codes = [c for c in self._codes if c[0] != request_id]

    def has_work(self) -> bool:
        return bool(self._events or self._codes)

    def step(self) -> list:
        events, self._events = self._events, []
        if not self._codes:
            return events
        rids, iterations, codes = zip(*self._codes)
        self._codes = []
        return [NodeOutputs(NODE, rids, iterations, {"codes": torch.tensor(codes, dtype=torch.int64)})] + events

    def ready(self) -> bool:
        return True

    def load(self) -> dict:
        return {"code_runs": len(self.runs)}

    def close(self) -> None:
        self.runs.clear()


def make_orpheus_lm(checkpoint: str, device: str = "cpu", **engine_options):
    """The Orpheus LM service: thinker (prefill, decode) + codes in one process."""
    from runtime.colocated import Colocated
    from services.thinker.component import ThinkerComponent

    thinker = ThinkerComponent.from_checkpoint(checkpoint, device=device, **engine_options)
    return Colocated([thinker, AudioCodesComponent()], name="orpheus_lm")
