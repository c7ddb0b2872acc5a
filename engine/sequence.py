"""One request's state inside the engine: its tokens, where their K/V live, how far
the cache has got, and whether (and why) it has finished.

Everything the scheduler, KV pool and sampler need about a request is here, so that
preemption, parking and abort only ever touch this one object.
"""
from __future__ import annotations

import enum
import time

from engine.embed_rows import EmbedRows
from engine.sampling_params import SamplingParams
from core.errors import InvalidArgument


class SequenceStatus(enum.Enum):
    WAITING = "waiting"    # holds no blocks; new, or preempted (its K/V are recomputed)
    RUNNING = "running"    # admitted: holds blocks, is scheduled every step it can be
    PARKED = "parked"      # waiting for streamed input: never scheduled, keeps its blocks
    FINISHED = "finished"


class Sequence:
    def __init__(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        arrival: int,
        max_context: int,
        vocab_size: int,
        prompt_embeds=None,
        media=None,
    ) -> None:
        _validate(prompt_ids, params, max_context, vocab_size)
        self.request_id = request_id
        self.params = params
        self.arrival = arrival
        self.max_context = max_context
        self.vocab_size = vocab_size
        self.status = SequenceStatus.WAITING
        # When its outputs are due (core.pace.Pace; None: no media deadline) and when it
        # was queued (unix seconds): the scheduler's slack order reads both.
        self.pace = None
        self.queued_s = time.time()
        self.finish_reason: str | None = None  # "eos" | "stop" | "length" | "context" | "aborted"
        self.block_table: list[int] = []       # physical KV blocks, in token order
        self.num_cached_tokens = 0             # tokens whose K/V are in the cache
        # One list for prompt + output: the runner reads token_ids every step, so it
        # must not be rebuilt each time.
        self._token_ids: list[int] = [int(t) for t in prompt_ids]
        self._num_prompt = len(self._token_ids)
        # token_ids as a long tensor, extended as tokens are appended (ids_tensor): the
        # repetition penalty reads it every step, and converting a list of n ids is O(n).
        self._ids_tensor = None
        # Fed embeddings instead of ids (the talker): row p is the input at position p;
        # the ids still say what was sampled (stop rules, repetition penalty).
        self.input_embeds: EmbedRows | None = None
        if prompt_embeds is not None:
            self.input_embeds = EmbedRows(prompt_embeds)
            if len(self.input_embeds) != self._num_prompt:
                raise InvalidArgument(f"prompt has {self._num_prompt} ids but {len(self.input_embeds)} embedding rows")
        # Audio/image rows and multimodal rope ids of the prompt (engine.prompt_media.PromptMedia)
        self.media = media
        if media is not None and media.num_prompt != self._num_prompt:
            raise InvalidArgument(f"prompt has {self._num_prompt} ids but media positions for {media.num_prompt}")
        # -- K/V reuse (engine.prefix_cache) ------------------------------------------------
        self.chain = None                      # engine.block_chain.BlockChain: its block names; None: not cached
        self.segments: tuple[tuple[int, int], ...] = ()  # bidirectional [start, end) spans of the prompt
        # The blocks of the context it continues (engine.contexts), pinned by one reference
        # of its own from add to retire, and how many of its tokens they hold.
        self.base_blocks: list[int] = []
        self.base_tokens = 0
        self.num_cached_prompt_tokens: int | None = None  # prompt tokens reused at its first admission
        self.rows_emitted = 0                  # positions whose captured rows were handed out
        self.continues = None                  # engine.contexts.Context it continues (counted as a user)
        self.keep = None                       # engine.contexts.Keep: keep the result as a context
        self.kept_context_id: str | None = None

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.name}, tokens={self.num_tokens}, "
                f"cached={self.num_cached_tokens}, blocks={len(self.block_table)})")

    # -- derived state ---------------------------------------------------------------
    @property
    def token_ids(self) -> list[int]:
        """Prompt + output. A live view: read it, never mutate it."""
        return self._token_ids

    @property
    def prompt_ids(self) -> list[int]:
        return self._token_ids[: self._num_prompt]

    @property
    def output_ids(self) -> list[int]:
        return self._token_ids[self._num_prompt:]

    def ids_tensor(self, with_prompt: bool = True):
        """token_ids (or output_ids without the prompt) as a CPU int64 tensor [n]. Shared
        and read-only: tokens only ever append, so the cached prefix stays valid."""
        import torch

        have = self._ids_tensor
        if have is None or len(have) != len(self._token_ids):
            done = 0 if have is None else len(have)
            new = torch.tensor(self._token_ids[done:], dtype=torch.long)
            self._ids_tensor = new if have is None else torch.cat((have, new))
        return self._ids_tensor if with_prompt else self._ids_tensor[self._num_prompt:]

    @property
    def num_tokens(self) -> int:
        return len(self._token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return self._num_prompt

    @property
    def num_output_tokens(self) -> int:
        return len(self._token_ids) - self._num_prompt

    @property
    def last_token_id(self) -> int:
        return self._token_ids[-1]

    @property
    def num_uncached_tokens(self) -> int:
        return self.num_tokens - self.num_cached_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    # -- transitions -----------------------------------------------------------------
    def append_token(self, token_id: int) -> None:
        """Add a sampled token, then apply the stop rules (the stopping token is kept)."""
        if self.is_finished:
            raise RuntimeError(f"append_token on finished request {self.request_id!r}")
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"sampled id {token_id} outside vocab size {self.vocab_size}")
        self._token_ids.append(int(token_id))
        reason = self._stop_reason(token_id)
        if reason is not None:
            self.finish(reason)

    def finish(self, reason: str) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason

    def _stop_reason(self, token_id: int) -> str | None:
        p = self.params
        if token_id in p.eos_token_ids:
            return "eos"
        if token_id in p.stop_token_ids:
            return "stop"
        # "length" before "context": when both hold, the request got what it asked for.
        if self.num_output_tokens >= p.max_new_tokens:
            return "length"
        # Unreachable for a validated request (prompt + max_new_tokens <= max_context);
        # kept so a sequence can never grow past the positions the model has.
        if self.num_tokens >= self.max_context:
            return "context"
        return None


def _validate(prompt_ids: list[int], params: SamplingParams, max_context: int, vocab_size: int) -> None:
    """The request against the model. params are valid on their own (SamplingParams), and
    max_context, vocab_size > 0 (ModelConfig, EngineConfig)."""
    if len(prompt_ids) == 0:
        raise InvalidArgument("prompt is empty")
    for t in prompt_ids:
        if t < 0:
            raise InvalidArgument(f"input id {t} is negative")
        if t >= vocab_size:
            raise InvalidArgument(f"input id {t} >= vocab size {vocab_size}")
    for name in ("suppress_token_ids", "eos_token_ids", "stop_token_ids"):
        for t in getattr(params, name):
            if t >= vocab_size:
                raise InvalidArgument(f"{name} id {t} >= vocab size {vocab_size}")
    if len(set(params.suppress_token_ids)) >= vocab_size:
        raise InvalidArgument("suppress_token_ids cover the whole vocabulary")
    total = len(prompt_ids) + params.max_new_tokens
    if total > max_context:
        raise InvalidArgument(
            f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) = {total} "
            f"is past the context length {max_context}")
