"""The thinker as a component: `prefill` (prompt -> first token) and `decode` (a loop
run inside the service: one token per engine step until a stop rule).

`prefill_media` is prefill for a prompt with media: what its other inputs (the encoded
media parts) become, and what it sends besides the token rows, is the model's, through
its thinker hook (services/thinker/hooks.py); a checkpoint whose hook gives no media
prompt refuses it.

Between prefill and decode the request keeps its KV context and is parked (not
polled) until decode opens. Every open request advances in the same engine step
(continuous batching); one step's outputs leave as one batch of events.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.engine_core import CREDIT
from engine.engine_load import engine_load
from engine.llm_engine import EngineConfig, LLMEngine
from engine.sampling_params import TextParams
from runtime.items import NodeDone, NodeOutput, OpenNode
from core.errors import InvalidArgument
from services.kept_context import context_report, engine_context, prefix_summary
from services.thinker.hooks import ThinkerHook, thinker_hook

MEDIA_PREFILL = "prefill_media"


@dataclass
class ThinkerRun:
    """One request on the thinker: its prefill and decode node runs."""

    prefill: OpenNode
    decode: OpenNode | None = None
    num_decoded: int = 0
    is_finished: bool = False     # the sequence stopped (at prefill or later)
    parts: dict = field(default_factory=lambda: {"hidden": [], "embeds": []})  # rows since the last token
    prompt: dict = field(default_factory=dict)  # a media prefill's extra outputs (the hook's), with the first token


class ThinkerComponent:
    name = "thinker"
    nodes = ("prefill", MEDIA_PREFILL, "decode")

    def __init__(self, engine: LLMEngine, eos_token_ids: tuple[int, ...] = (),
                 hook: ThinkerHook | None = None) -> None:
        self.engine = engine
        self.eos_token_ids = eos_token_ids
        self.hook = hook  # the checkpoint's model's specifics; None: a plain text model
        self.runs: dict[str, ThinkerRun] = {}
        self._events: list = []

    @classmethod
    def from_checkpoint(cls, checkpoint: str, device: str = "cpu", hooks: tuple[str, ...] = (),
                        **engine_options) -> "ThinkerComponent":
        """engine_options: EngineConfig fields (over the hook's); device "cpu", "cuda" or
        "cuda:N" (an InvalidArgument naming engine.device where that device is not
        available); hooks: the registered models' thinker hooks ("module:callable"), the
        first that answers for the checkpoint is used."""
        hook = thinker_hook(checkpoint, tuple(hooks))
        engine_options = {**(hook.engine_options if hook else {}), **engine_options}
        engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, device=device, **engine_options))
        # eos: config + generation_config, as the loader read them
        return cls(engine, engine.model.config.eos_token_ids, hook)

    def open(self, item: OpenNode, inputs) -> None:
        if item.node in ("prefill", MEDIA_PREFILL):
            self._open_prefill(item, inputs)
        elif item.node == "decode":
            self._open_decode(item)
        else:
            raise InvalidArgument(f"open.node {item.node!r}: the thinker runs {list(self.nodes)}")

    def _open_prefill(self, item: OpenNode, inputs) -> None:
        if "input_ids" not in inputs:
            raise InvalidArgument("open.inputs: prefill needs input_ids")
        prompt = inputs["input_ids"].reshape(-1).tolist()
        params = TextParams.from_params(item.params).sampling(self.eos_token_ids, item.stop_rule.stop_token_ids)
        run, media = ThinkerRun(item), None
        if item.node == MEDIA_PREFILL:
            if self.hook is None or self.hook.media_prompt is None:
                raise InvalidArgument(f"open.node {item.node!r}: this checkpoint takes no media (no registered "
                                      "model's thinker hook gives it a media prompt)")
            built = self.hook.media_prompt(prompt, inputs)
            prompt, media, run.prompt = list(built.prompt_ids), built.media, dict(built.outputs)
        if item.pace is not None:
            self.engine.set_pace(item.request_id, item.pace)
        self.engine.add_request(item.request_id, prompt, params, media=media, context=engine_context(item))
        if item.node == "prefill" or item.contexts:
            # The prompt in the engine (a continued context's tokens first): what the rows the
            # prompt's first token brings stand for. A media prompt's hook gave the new part's.
            whole = self.engine.scheduler.find(item.request_id).prompt_ids if item.contexts else prompt
            run.prompt["prompt_ids"] = torch.tensor(whole, dtype=torch.int64)
        self.runs[item.request_id] = run

    def _open_decode(self, item: OpenNode) -> None:
        run = self.runs.get(item.request_id)
        if run is None:
            raise InvalidArgument(f"open.request_id {item.request_id!r}: decode before prefill")
        run.decode = item
        if item.pace is not None:
            self.engine.set_pace(item.request_id, item.pace)
        if run.is_finished:  # the first token already ended it
            self._finish(run)
        else:
            if item.stop_rule.stop_token_ids:  # the decode loop's own stop ids (Orpheus: end of speech)
                self.engine.add_stop_tokens(item.request_id, item.stop_rule.stop_token_ids)
            self.engine.unpark(item.request_id)

    def push(self, item, tensors) -> None:
        raise InvalidArgument(f"push.node {item.node!r}: the thinker takes no streamed input")

    def park(self, request_id: str, node: str, iteration: tuple[int, ...]) -> None:
        """The run's output credit is spent or its routed window is full: its decodes
        sit steps out (keeping its KV) until resumed (runtime.backpressure)."""
        self.engine.park(request_id, CREDIT)  # a request that has finished holds nothing

    def resume(self, request_id: str, node: str, iteration: tuple[int, ...]) -> None:
        self.engine.unpark(request_id, CREDIT)

    def cancel(self, request_id: str) -> None:
        self.runs.pop(request_id, None)
        self.engine.abort(request_id)
        self._events = [e for e in self._events if e.request_id != request_id]

    def repace(self, request_id: str, origin_s: float) -> None:
        self.engine.repace(request_id, origin_s)

    def context_op(self, op) -> None:
        """A kept context released (keep_tokens 0) or cut back to its first keep_tokens
        tokens (runtime.items.ContextOp); NotFound when it is gone."""
        if op.keep_tokens:
            self.engine.contexts.truncate(op.context_id, op.owner, op.keep_tokens)
        else:
            self.engine.contexts.release(op.context_id, op.owner)

    def has_work(self) -> bool:
        return bool(self._events) or self.engine.has_work()

    def step(self) -> list:
        for out in self.engine.step():
            run = self.runs.get(out.request_id)
            if run is not None:
                self._collect(run, out)
        events, self._events = self._events, []
        return events

    def _collect(self, run: ThinkerRun, out) -> None:
        for name in ("hidden", "embeds"):
            if getattr(out, name) is not None:
                run.parts[name].append(getattr(out, name))
        if out.token_id is None:
            return  # a prefill chunk: no token yet
        tensors = {"token": torch.tensor([out.token_id])}
        for name, rows in run.parts.items():
            if rows:  # [q, hidden] of every token computed since the last token (prefill chunks included)
                tensors[name] = torch.cat(rows)
                rows.clear()
        run.is_finished = out.is_finished
        if run.decode is None:  # the first token ends prefill; decode opens next
            p = run.prefill
            tensors.update(run.prompt)
            report = context_report(out, True, prefix_summary(self.engine))
            self._events += [NodeOutput(p.request_id, p.node, tensors, p.iteration, report),
                             NodeDone(p.request_id, p.node, iteration=p.iteration)]
            if not out.is_finished:
                self.engine.park(out.request_id)
            return
        d = run.decode
        self._events.append(NodeOutput(d.request_id, "decode", tensors, d.iteration + (run.num_decoded,),
                                       context_report(out)))
        run.num_decoded += 1
        if out.is_finished or (d.max_iters and run.num_decoded >= d.max_iters):
            self._finish(run)

    def _finish(self, run: ThinkerRun) -> None:
        d = run.decode
        self._events.append(NodeDone(d.request_id, "decode", iteration=d.iteration))
        self.runs.pop(d.request_id, None)
        self.engine.abort(d.request_id)  # no-op when the sequence already finished

    def load(self) -> dict:
        return engine_load(self.engine)

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        self.runs.clear()
