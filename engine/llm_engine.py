"""The KV-cache engine: continuous batching over one model, one step at a time.

    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint="ckpt/"))
    engine.add_request("r1", [1, 2, 3], SamplingParams(max_new_tokens=8))
    while engine.has_work():
        for out in engine.step(): ...

A step reads schedule -> run -> postprocess. Requests join and leave at every step.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from engine.device_option import resolve_device
from engine.model_runner import ModelRunner
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from core.errors import InvalidArgument


@dataclass(frozen=True)
class EngineConfig:
    """checkpoint: a Hugging Face directory. num_blocks x block_size tokens of KV."""

    checkpoint: str = ""
    dtype: str | None = None
    block_size: int = 16
    num_blocks: int = 512
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    prefill_chunk_size: int = 512
    capture_layer: int | None = None   # return this layer's hidden states per token (the talker's input)
    return_embeddings: bool = False    # return input embeddings per token
    device: str = "cpu"                # "cpu", "cuda" or "cuda:N": weights, KV cache and kernels
    cuda_graphs: bool = True           # on CUDA: replay captured graphs for decode steps (ignored on CPU)

    def __post_init__(self) -> None:
        for name in ("block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens", "prefill_chunk_size"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"engine.{name} must be >= 1, got {getattr(self, name)}")
        if not isinstance(self.cuda_graphs, bool):
            raise InvalidArgument(f"engine.cuda_graphs must be a bool, got {self.cuda_graphs!r}")
        resolve_device(self.device)  # InvalidArgument naming engine.device (e.g. CUDA asked, none here)

    @property
    def cuda_graph_sizes(self) -> list[int]:
        """Decode batch sizes to capture as CUDA graphs ([] on CPU or with cuda_graphs off)."""
        if not self.cuda_graphs or resolve_device(self.device).type != "cuda":
            return []
        from engine.cuda_graphs import graph_batch_sizes

        return graph_batch_sizes(self.max_num_seqs)

    @property
    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                               prefill_chunk_size=self.prefill_chunk_size, num_blocks=self.num_blocks,
                               block_size=self.block_size)


@dataclass
class StepOutput:
    """What one step produced for one request."""

    request_id: str
    token_id: int | None            # None while its prompt is still being prefilled
    is_finished: bool = False
    finish_reason: str | None = None
    hidden: object = None           # [q, hidden] captured layer states of the tokens computed this step
    embeds: object = None           # [q, hidden] their input embeddings
    num_prompt_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)


class LLMEngine:
    def __init__(self, model, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self.scheduler = Scheduler(config.scheduler_config)
        self.runner = ModelRunner(model, config.num_blocks, config.block_size, config.capture_layer,
                                  config.return_embeddings, resolve_device(config.device), config.cuda_graph_sizes)
        self.sampler = Sampler()
        self._arrivals = itertools.count()
        self.sequences: dict[str, Sequence] = {}
        self.num_steps = 0
        self.forward_s = 0.0  # time inside the model forward (the rest of a step is engine overhead)

    @classmethod
    def from_checkpoint(cls, config: EngineConfig) -> "LLMEngine":
        from engine.models.loader import load_model

        return cls(load_model(config.checkpoint, dtype=config.dtype, device=resolve_device(config.device)), config)

    @property
    def max_context(self) -> int:
        return min(self.model.config.max_position, self.config.num_blocks * self.config.block_size)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    prompt_embeds=None) -> Sequence:
        """Validates and queues a request; it joins at the next step. prompt_embeds
        [len(prompt_ids), hidden], when given, are the prompt's input rows (not the ids')."""
        if request_id in self.sequences:
            raise InvalidArgument(f"request_id {request_id!r} is already running")
        seq = Sequence(request_id, list(prompt_ids), params, next(self._arrivals), self.max_context,
                       self.model.config.vocab_size, prompt_embeds)
        self.sequences[request_id] = seq
        self.scheduler.add(seq)
        return seq

    def abort(self, request_id: str) -> None:
        if self.sequences.pop(request_id, None) is not None:
            self.scheduler.abort(request_id)

    def park(self, request_id: str) -> None:
        self.scheduler.park(request_id)

    def unpark(self, request_id: str) -> None:
        self.scheduler.unpark(request_id)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[StepOutput]:
        batch = self.scheduler.schedule()                       # schedule
        if not batch.seqs:
            return []
        t0 = time.perf_counter()
        out = self.runner.run(batch, self.scheduler.pool)       # run
        self.forward_s += time.perf_counter() - t0
        sampled_rows = self.sampler(out.logits, [s for s, m in zip(batch.seqs, batch.sample_mask) if m])
        it = iter(sampled_rows)
        sampled = [next(it) if m else None for m in batch.sample_mask]
        self.scheduler.postprocess(batch, sampled)              # postprocess
        self.num_steps += 1
        return [self._output(i, seq, token, out) for i, (seq, token) in enumerate(zip(batch.seqs, sampled))]

    def _output(self, i: int, seq: Sequence, token: int | None, out) -> StepOutput:
        if seq.is_finished:
            self.sequences.pop(seq.request_id, None)
        return StepOutput(seq.request_id, token, seq.is_finished, seq.finish_reason,
                          out.hidden[i] if out.hidden is not None else None,
                          out.embeds[i] if out.embeds is not None else None,
                          seq.num_prompt_tokens, list(seq.output_ids) if seq.is_finished else [])

    def generate(self, prompts: list[list[int]], params: list[SamplingParams] | SamplingParams) -> list[list[int]]:
        """Offline: runs every prompt to completion in one continuously batched workload."""
        params = params if isinstance(params, list) else [params] * len(prompts)
        ids = [f"gen-{next(self._arrivals)}" for _ in prompts]
        for rid, prompt, p in zip(ids, prompts, params):
            self.add_request(rid, prompt, p)
        results: dict[str, list[int]] = {}
        while self.has_work():
            for o in self.step():
                if o.is_finished:
                    results[o.request_id] = o.output_ids
        return [results[rid] for rid in ids]
