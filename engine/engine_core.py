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

K/V outlive requests: the pool keeps computed blocks for later prompts that start the same
way (engine.prefix_cache), and a request may continue a named context and leave its result
as one (engine.contexts: `self.contexts` forks, truncates, pins and releases them). The
rows a step hands out per position (captured hidden states, input embeddings) are kept
with the blocks (engine.block_rows), so a reused position still gets its rows.
"""
from __future__ import annotations

import itertools
import secrets
import time
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path

import torch

from core.block_hash import model_seed
from core.errors import InvalidArgument
from core.pace import Pace
from engine.batch import ScheduledBatch
from engine.block_chain import BlockChain
from engine.block_rows import BlockRows
from engine.context_prompt import content_of, continuation
from engine.contexts import ContextTable, ContextRequest, Keep
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
        # Names every block of this model's K/V; a replica publishes it so a router can name
        # a text prompt's blocks the same way (core.block_hash.chain_hashes).
        self.prefix_seed = model_seed("engine", type(model).__name__, repr(model.config),
                                      Path(config.checkpoint).name, config.text_part, str(config.dtype))
        self.scheduler = Scheduler(config.scheduler_config, seed=self.prefix_seed, on_retire=self._on_retire)
        self.runner = runner
        pool = self.scheduler.pool
        captures = runner.capture_layer is not None or runner.return_embeddings
        self.rows = BlockRows(config.num_blocks, config.block_size) if captures else None
        pool.copy_block = self._copy_block
        self.contexts = ContextTable(pool, config.context_limits)
        self.num_prefill_tokens = 0  # prompt positions computed (reused ones are not)
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
                      prompt_embeds: torch.Tensor | None = None, media=None, context: ContextRequest | None = None,
                      cache_salt: str = "", keep: Keep | None = None) -> Sequence:
        """Validates the request against the model and queues it; it joins at the next step.
        prompt_embeds [len(prompt_ids), hidden], when given, are the prompt's input rows;
        media (engine.prompt_media.PromptMedia), the rows and rope ids of its audio and images;
        context: the context it continues (its prompt goes on after the context's tokens) and
        whether to keep its result; cache_salt: blocks are shared only among equal salts."""
        source = None
        if context is not None:
            if context.context_id is not None:
                source = self.contexts.get(context.context_id, context.owner)
                prompt_ids, prompt_embeds, media = continuation(source.content, prompt_ids, prompt_embeds, media)
            if context.keep_id is not None and context.keep_id in self.contexts:
                raise InvalidArgument(f"keep_id {context.keep_id!r}: a context of that id exists")
            if context.keep and keep is None:
                keep = Keep(context.owner, context.keep_id)
        if not isinstance(cache_salt, str):
            raise InvalidArgument(f"cache_salt must be a string, got {cache_salt!r}")
        if media is not None and media.rows.shape[1] != self.model.config.hidden_size:
            raise InvalidArgument(f"media rows have width {media.rows.shape[1]}, the model "
                                  f"{self.model.config.hidden_size}")
        if media is not None and not self.model.config.mrope_section:
            raise InvalidArgument("media: this model takes no audio or image input (no multimodal rope)")
        seq = Sequence(request_id, list(prompt_ids), params, next(self._arrivals), self.max_context,
                       self.model.config.vocab_size, prompt_embeds, media)
        seq.pace = self.paces.get(request_id)
        seq.keep = keep
        if cache_salt:
            seq.chain = BlockChain(BlockChain.seed_for(self.prefix_seed, cache_salt))
        if source is not None:  # its own pin on the context's blocks, held until it leaves
            seq.base_blocks, seq.base_tokens = list(source.blocks), source.content.num_computed
            self.scheduler.pool.incref(seq.base_blocks)
        try:
            self.scheduler.add(seq)
        except BaseException:
            self.scheduler.pool.decref(seq.base_blocks, request_id)
            raise
        if source is not None:
            source.users += 1
            seq.continues = source
        if self.holds.get(request_id):  # parked by its service before it started
            self.scheduler.park(request_id)
        return seq

    def extend_context(self, context_id: str, owner: str, token_ids: list[int], prompt_embeds=None, media=None,
                       request_id: str | None = None) -> str:
        """Queues the prefill of token_ids onto the owner's context; once that request (the
        returned id; its outputs are ordinary ones, its one sampled token is not kept)
        finishes, the context holds them too."""
        ctx = self.contexts.get(context_id, owner)
        if ctx.extending is not None:
            raise InvalidArgument(f"context {context_id!r} is being extended by request {ctx.extending!r}")
        if len(token_ids) == 0:
            raise InvalidArgument("token_ids: an extension needs at least one token")
        request_id = request_id or f"extend-{secrets.token_hex(8)}"
        self._add_sequence(request_id, token_ids, SamplingParams(max_new_tokens=1), prompt_embeds, media,
                           ContextRequest(owner, context_id), keep=Keep(owner, None, into=ctx))
        ctx.extending = request_id
        return request_id

    def _on_retire(self, seq: Sequence) -> None:
        """A sequence leaves (finished or aborted), its blocks still held: keep them as a
        context if it asked to and finished."""
        if seq.continues is not None:
            seq.continues.users -= 1
        keep, into = seq.keep, seq.keep and seq.keep.into
        if into is not None and into.extending == seq.request_id:
            into.extending = None
        if keep is None or not seq.is_finished or seq.finish_reason == "aborted":
            return
        content = content_of(seq, prompt_only=into is not None)
        blocks = seq.block_table[:self.scheduler.pool.blocks_for(content.num_computed)]
        if into is not None:
            if self.contexts.is_live(into):
                self.contexts.replace(into, content, blocks)
                seq.kept_context_id = into.context_id
        elif keep.context_id is None or keep.context_id not in self.contexts:
            seq.kept_context_id = self.contexts.add(keep.owner, content, blocks, keep.context_id).context_id

    def _copy_block(self, src: int, dst: int) -> None:
        """Copy-on-write of a shared block: its K/V and the rows kept with it."""
        self.runner.copy_block(src, dst)
        if self.rows is not None:
            self.rows.copy_block(src, dst)

    def cache_stats(self) -> dict[str, float]:
        """Plain numbers about K/V reuse, for the service to export."""
        pool, cache, contexts = self.scheduler.pool, self.scheduler.cache, self.contexts
        return {"prefix_cache_enabled": float(cache.enabled), "kv_blocks_total": pool.total,
                "kv_blocks_used": pool.num_used_blocks, "kv_blocks_free": pool.num_free_blocks,
                "kv_blocks_cached": pool.num_cached_blocks, "kv_blocks_evicted_total": pool.num_evicted,
                "kv_blocks_copied_total": pool.num_copied, "prefix_lookup_tokens_total": cache.lookup_tokens,
                "prefix_hit_tokens_total": cache.hit_tokens,
                "prefix_hit_rate": cache.hit_tokens / cache.lookup_tokens if cache.lookup_tokens else 0.0,
                "prompt_tokens_computed_total": self.num_prefill_tokens, "contexts": len(contexts),
                "context_blocks": contexts.num_blocks, "contexts_kept_total": contexts.kept_total,
                "contexts_dropped_total": contexts.dropped_total}

    def cached_block_hashes(self, limit: int) -> list[bytes]:
        """Up to `limit` block names this engine holds, most useful first (for a router)."""
        return self.scheduler.pool.recent_names(limit)

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
        self.contexts.expire()
        batch = self.scheduler.schedule()                           # schedule
        if not batch.seqs:
            return []
        t0 = time.perf_counter()
        out = self.runner.run(batch, self.scheduler.pool)           # run
        if self.config.step_delay_ms_per_seq:
            time.sleep(self.config.step_delay_ms_per_seq * len(batch.seqs) / 1e3)
        self.forward_s += time.perf_counter() - t0
        if self.rows is not None:
            self.rows.capture(batch, out)  # before postprocess: a finishing sequence's blocks go there
        for seq, start, n in zip(batch.seqs, batch.start_positions, batch.num_query_tokens):
            self.num_prefill_tokens += max(0, min(start + n, seq.num_prompt_tokens) - start)
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
        self.scheduler.check_integrity(self.contexts.holders())
        self.contexts.check()
        users: dict[str, int] = {}
        for seq in (self.scheduler.find(r) for r in self.scheduler.request_ids):
            if seq.continues is not None:
                users[seq.continues.context_id] = users.get(seq.continues.context_id, 0) + 1
        for ctx in self.contexts.values():
            if ctx.users != users.get(ctx.context_id, 0):
                raise IntegrityError(f"context {ctx.context_id!r} counts {ctx.users} users, "
                                     f"{users.get(ctx.context_id, 0)} sequences continue it")
        for request_id, reasons in self.holds.items():
            seq = self.scheduler.find(request_id)
            if not reasons or (seq is None and not self._is_pending(request_id)):
                raise IntegrityError(f"request {request_id!r} is held for {sorted(reasons)} but not in the engine")
            if seq is not None and seq.status is not PARKED:
                raise IntegrityError(f"request {request_id!r} is held for {sorted(reasons)} but {seq.status}")
