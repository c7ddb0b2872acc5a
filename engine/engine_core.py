"""The step every KV-cache engine runs, and the request bookkeeping around it.

A step reads schedule -> run -> postprocess:
  schedule     the scheduler picks decodes and prefill chunks (continuous batching, preemption);
  run          the model over the paged KV cache: ids, or embedding rows for sequences fed
               rows (Sequence.input_embeds, e.g. the talker's);
  postprocess  one token sampled for every sequence that reached its last input, the
               sequences advanced by the scheduler, then the engine's `_outputs` hook turns
               the step into its outputs (the LLM: tokens; the talker: audio frames).

The scheduler holds the one index of live sequences: park, unpark and abort go through it,
and a request it does not hold is NotFound.
"""
from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from dataclasses import replace

import torch

from core.errors import InvalidArgument
from core.pace import Pace
from engine.batch import ScheduledBatch
from engine.engine_config import EngineConfig
from engine.model_runner import ForwardOutput, ModelRunner
from engine.sampler import Sampler
from engine.kv_pool import IntegrityError
from engine.sampling_params import SamplingParams
from engine.scheduler import PARKED, Scheduler
from engine.sequence import Sequence


CREDIT = "credit"  # a park reason: the service holds the request (its output credit is spent)


class EngineCore(ABC):
    def __init__(self, model, config: EngineConfig, runner: ModelRunner) -> None:
        self.model = model
        self.config = config
        self.scheduler = Scheduler(config.scheduler_config)
        self.runner = runner
        self.sampler = Sampler()
        self._arrivals = itertools.count()
        self.paces: dict[str, Pace] = {}  # request id -> when its outputs are due (until abort)
        # request id -> why it is parked: the engine's own reason (waiting for an input) and
        # the service's (an output's credit is spent); it runs again once none is left.
        self.holds: dict[str, set[str]] = {}
        self.num_steps = 0
        self.forward_s = 0.0  # time inside the model forward (the rest of a step is engine overhead)

    @property
    def max_context(self) -> int:
        return min(self.model.config.max_position, self.config.num_blocks * self.config.block_size)

    def _add_sequence(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                      prompt_embeds: torch.Tensor | None = None, media=None) -> Sequence:
        """Validates the request against the model and queues it; it joins at the next step.
        prompt_embeds [len(prompt_ids), hidden], when given, are the prompt's input rows;
        media (engine.prompt_media.PromptMedia), the rows and rope ids of its audio and images."""
        if media is not None and media.rows.shape[1] != self.model.config.hidden_size:
            raise InvalidArgument(f"media rows have width {media.rows.shape[1]}, the model "
                                  f"{self.model.config.hidden_size}")
        if media is not None and not self.model.config.mrope_section:
            raise InvalidArgument("media: this model takes no audio or image input (no multimodal rope)")
        seq = Sequence(request_id, list(prompt_ids), params, next(self._arrivals), self.max_context,
                       self.model.config.vocab_size, prompt_embeds, media)
        seq.pace = self.paces.get(request_id)
        self.scheduler.add(seq)
        if self.holds.get(request_id):  # parked by its service before it started
            self.scheduler.park(request_id)
        return seq

    def set_pace(self, request_id: str, pace: Pace) -> None:
        """When the request's outputs are due (core.pace); it may come before the sequence."""
        self.paces[request_id] = pace
        seq = self.scheduler.find(request_id)
        if seq is not None:
            seq.pace = pace

    def repace(self, request_id: str, origin_s: float) -> None:
        """The request's playback origin moved (its first audio played, or it stalled)."""
        pace = self.paces.get(request_id)
        if pace is not None:
            self.set_pace(request_id, pace.moved(origin_s))

    def add_stop_tokens(self, request_id: str, token_ids) -> None:
        """More ids that end the request from its next token on (a decode loop's stop rule,
        known only once the loop opens after prefill); NotFound for an unknown request."""
        seq = self.scheduler.get(request_id)
        new = tuple(int(t) for t in token_ids if int(t) not in seq.params.stop_token_ids)
        if new:
            seq.params = replace(seq.params, stop_token_ids=seq.params.stop_token_ids + new)

    def abort(self, request_id: str) -> None:
        """Frees the request's blocks; an unknown or finished request is a no-op."""
        self.paces.pop(request_id, None)
        self.holds.pop(request_id, None)
        self.scheduler.abort(request_id)

    def park(self, request_id: str, reason: str = "engine") -> None:
        """The request sits steps out (keeping its KV) until unparked for every reason
        it was parked for; NotFound for a request the engine never saw (for its own reason)."""
        if reason == "engine" or self.scheduler.find(request_id) is not None:
            self.scheduler.park(request_id)
        elif not self._is_pending(request_id):
            return  # it finished (its last output spent the credit): nothing left to hold
        self.holds.setdefault(request_id, set()).add(reason)

    def _is_pending(self, request_id: str) -> bool:
        """Known to the engine but not started (no sequence yet); none in the base engine."""
        return False

    def unpark(self, request_id: str, reason: str = "engine") -> None:
        held = self.holds.get(request_id, set())
        held.discard(reason)
        if held:
            return  # still parked for another reason
        self.holds.pop(request_id, None)
        if reason == "engine" or self.scheduler.find(request_id) is not None:
            self.scheduler.unpark(request_id)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    @torch.no_grad()
    def step(self) -> list:
        batch = self.scheduler.schedule()                           # schedule
        if not batch.seqs:
            return []
        t0 = time.perf_counter()
        out = self.runner.run(batch, self.scheduler.pool)           # run
        if self.config.step_delay_ms_per_seq:
            time.sleep(self.config.step_delay_ms_per_seq * len(batch.seqs) / 1e3)
        self.forward_s += time.perf_counter() - t0
        rows = iter(self.sampler(out.logits, [s for s, m in zip(batch.seqs, batch.sample_mask) if m]))
        sampled = [next(rows) if m else None for m in batch.sample_mask]
        self.scheduler.postprocess(batch, sampled)                  # postprocess
        self.num_steps += 1
        return self._outputs(batch, sampled, out)

    @abstractmethod
    def _outputs(self, batch: ScheduledBatch, sampled: list[int | None], out: ForwardOutput) -> list:
        """The step's outputs. sampled: per batch sequence, its new token or None (a prefill
        chunk short of the prompt's end); out.sampled_hidden rows follow the sampled ones."""

    def check_integrity(self) -> None:
        self.scheduler.check_integrity()
        for request_id, reasons in self.holds.items():
            seq = self.scheduler.find(request_id)
            if not reasons or (seq is None and not self._is_pending(request_id)):
                raise IntegrityError(f"request {request_id!r} is held for {sorted(reasons)} but not in the engine")
            if seq is not None and seq.status is not PARKED:
                raise IntegrityError(f"request {request_id!r} is held for {sorted(reasons)} but {seq.status}")
