"""The KV-cache engine: continuous batching over one model, one step at a time.

    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint="ckpt/"))
    engine.add_request("r1", [1, 2, 3], SamplingParams(max_new_tokens=8))
    while engine.has_work():
        for out in engine.step(): ...

A step reads schedule -> run -> postprocess (engine/engine_core.py); requests join and
leave at every step. Each step yields one StepOutput per scheduled sequence.

A request may continue a kept context and keep its own result as one (ContextRequest):

    engine.add_request("t1", ids, params, context=ContextRequest(owner="key", keep=True))
    ... the finished StepOutput's context_id names the kept context ...
    engine.add_request("t2", next_ids, params, context=ContextRequest(owner="key", context_id=cid))
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.batch import ScheduledBatch
from engine.device_option import resolve_device
from engine.engine_config import EngineConfig
from engine.engine_core import EngineCore
from engine.contexts import ContextRequest
from engine.model_runner import ForwardOutput, ModelRunner
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

__all__ = ["ContextRequest", "EngineConfig", "LLMEngine", "StepOutput"]


@dataclass
class StepOutput:
    """What one step produced for one request."""

    request_id: str
    token_id: int | None            # None while its prompt is still being prefilled
    is_finished: bool = False
    finish_reason: str | None = None
    # [r, hidden] captured layer states / input embeddings of the positions handed out this
    # step: every position once, reused ones (cache, context) with the first computed step
    hidden: object = None
    embeds: object = None
    num_prompt_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    num_cached_prompt_tokens: int = 0  # prompt tokens reused (not computed) at its admission
    context_id: str | None = None      # on the finished output: the context its result was kept as


class LLMEngine(EngineCore):
    def __init__(self, model, config: EngineConfig) -> None:
        runner = ModelRunner(model, config.num_blocks, config.block_size, config.capture_layer,
                             config.return_embeddings, resolve_device(config.device), config.cuda_graph_sizes)
        super().__init__(model, config, runner)

    @classmethod
    def from_checkpoint(cls, config: EngineConfig) -> "LLMEngine":
        from engine.models.loader import load_model

        model = load_model(config.checkpoint, dtype=config.dtype, device=resolve_device(config.device),
                           text_part=config.text_part)
        return cls(model, config)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    prompt_embeds=None, media=None, context: ContextRequest | None = None,
                    cache_salt: str = "") -> Sequence:
        """Validates and queues a request; it joins at the next step. prompt_embeds
        [len(prompt_ids), hidden], when given, are the prompt's input rows (not the ids');
        media (engine.prompt_media.PromptMedia), its audio and image rows and rope ids;
        context: the context it continues and whether its result is kept (NotFound for a
        context its owner does not hold); cache_salt: blocks are reused only among equal salts."""
        return self._add_sequence(request_id, prompt_ids, params, prompt_embeds, media, context, cache_salt)

    def _outputs(self, batch: ScheduledBatch, sampled: list[int | None], out: ForwardOutput) -> list[StepOutput]:
        return [StepOutput(seq.request_id, token, seq.is_finished, seq.finish_reason,
                           out.hidden[i] if out.hidden is not None else None,
                           out.embeds[i] if out.embeds is not None else None,
                           seq.num_prompt_tokens, list(seq.output_ids) if seq.is_finished else [],
                           seq.num_cached_prompt_tokens or 0, seq.kept_context_id)
                for i, (seq, token) in enumerate(zip(batch.seqs, sampled))]

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
