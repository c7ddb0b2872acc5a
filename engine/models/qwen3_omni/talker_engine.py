"""The talker engine: the paged KV-cache engine step (engine/engine_core.py) running the
Qwen3-Omni talker, fed embedding rows and emitting audio frames.

A step reads schedule -> run -> postprocess:
  schedule     the scheduler picks prefills and decodes (continuous batching, preemption);
  run          the talker decoder over the paged KV cache, fed embedding rows;
  postprocess  sample code group 0; for every request that goes on, the code predictor
               fills groups 1..G-1 (all such frames of the step as one batch); the frame
               is emitted and the next input row is the frame's codec embeddings plus the
               request's next text row. A request whose text row has not arrived yet is
               parked (it keeps its KV) until the thinker pushes it.

Requests enter with the thinker's prompt rows (add_request), take the thinker's rows as
they come (push_thinker), and go on after the thinker ends (end_thinker) until codec EOS.
`requests` holds each request's talker state (TalkerRequest); its sequence, once started,
is `req.seq`, the one the scheduler holds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument, NotFound
from engine.batch import ScheduledBatch
from engine.contexts import ContextRequest
from engine.device_option import resolve_device
from engine.engine_config import EngineConfig
from engine.engine_core import EngineCore
from engine.kv_pool import IntegrityError
from engine.model_runner import ForwardOutput, ModelRunner
from engine.models.qwen3_omni.params import DEFAULT_MAX_FRAMES
from engine.models.qwen3_omni.talker import Talker
from engine.models.qwen3_omni.talker_prompt import talker_media, talker_prompt
from engine.nucleus import top_p_filter
from engine.sampler import top_k_filter
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from engine.models.qwen3_omni.talker_request import TalkerRequest

PREDICTOR_TOP_K, PREDICTOR_TOP_P = 50, 0.8  # what HF's talker passes its code predictor when sampling


@dataclass
class TalkerOutput:
    request_id: str
    frame: list[int] | None = None   # G codes of one audio frame (group 0 first)
    is_finished: bool = False
    finish_reason: str | None = None
    num_cached_prompt_tokens: int = 0  # prompt rows reused (cache or context), not computed
    context_id: str | None = None      # on the finished output: the context its result was kept as
    num_prompt_tokens: int = 0         # its prompt rows (a continued context's included)


class TalkerEngine(EngineCore):
    def __init__(self, model: Talker, config: EngineConfig) -> None:
        if resolve_device(config.device).type != "cpu":  # its runner and code predictor are CPU-only for now
            raise InvalidArgument(f"engine.device {config.device!r}: the talker engine runs on 'cpu' only")
        super().__init__(model, config, ModelRunner(model, config.num_blocks, config.block_size))
        self.spec = model.spec
        self.requests: dict[str, TalkerRequest] = {}
        self._failed: list[TalkerOutput] = []  # requests that never start, reported at the next step

    @classmethod
    def from_checkpoint(cls, config: EngineConfig) -> "TalkerEngine":
        from engine.models.qwen3_omni.talker_loader import load_talker

        return cls(load_talker(config.checkpoint, dtype=config.dtype), config)

    def talker_params(self, max_new_tokens: int = DEFAULT_MAX_FRAMES, temperature: float = 0.9, top_k: int = 50,
                      top_p: float = 1.0, repetition_penalty: float = 1.05, seed: int | None = None,
                      min_new_tokens: int = 0) -> SamplingParams:
        """HF generate's talker defaults; temperature 0 is greedy. The penalty sees codec ids only."""
        return SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                              repetition_penalty=repetition_penalty, seed=seed, penalize_prompt=False,
                              min_new_tokens=min_new_tokens,
                              suppress_token_ids=self.spec.suppressed_ids,
                              eos_token_ids=(self.spec.codec["codec_eos_token_id"],))

    # -- requests ----------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams, speaker: str = "ethan",
                    embeds: torch.Tensor | None = None, hidden: torch.Tensor | None = None,
                    image_grids: tuple = (), context: ContextRequest | None = None, cache_salt: str = "") -> None:
        """Opens a request from the thinker's prompt ids and (some of) its rows [n, thinker_hidden];
        image_grids: (t, h, w) of each image in the prompt (they shape the talker's rope ids);
        context: a talker context its prompt rows go on from, and whether to keep its result
        (checked when its prompt goes in); cache_salt: blocks are reused only among equal salts."""
        if request_id in self.requests:
            raise InvalidArgument(f"request_id {request_id!r} is already on the talker")
        req = TalkerRequest(request_id, prompt_ids, params, self.spec.speaker_id(speaker), self.spec.tokens,
                            image_grids)
        if context is not None and context.context_id is not None:
            self.contexts.get(context.context_id, context.owner)  # NotFound now, not when its prompt goes in
        req.context, req.cache_salt = context, cache_salt
        self.requests[request_id] = req
        if embeds is not None:
            self.push_thinker(request_id, embeds, hidden)

    def push_thinker(self, request_id: str, embeds: torch.Tensor, hidden: torch.Tensor | None = None) -> None:
        req = self._get(request_id)
        if embeds.shape[-1] != self.spec.thinker_hidden_size:
            raise InvalidArgument(f"thinker rows have width {embeds.shape[-1]}, the talker takes "
                                  f"{self.spec.thinker_hidden_size}")
        req.add_rows(embeds, hidden)
        self._advance(req)

    def end_thinker(self, request_id: str) -> None:
        req = self._get(request_id)
        req.thinker_done = True
        self._advance(req)

    def abort(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        super().abort(request_id)
        self._failed = [o for o in self._failed if o.request_id != request_id]

    def has_work(self) -> bool:
        return bool(self._failed) or super().has_work()

    def _is_pending(self, request_id: str) -> bool:
        return request_id in self.requests  # waiting for the rows it starts on

    def _get(self, request_id: str) -> TalkerRequest:
        req = self.requests.get(request_id)
        if req is None:
            raise NotFound(f"request {request_id!r} is not on the talker")
        return req

    def _advance(self, req: TalkerRequest) -> None:
        """Starts the request once its prompt is complete; feeds a waiting text row."""
        if req.seq is None:
            if req.never_starts:
                self.abort(req.request_id)
                self._failed.append(TalkerOutput(req.request_id, None, True, "no_text"))
            elif req.can_start:
                self._start(req)
            return
        if req.pending is not None and self._feed(req, req.seq):
            self.unpark(req.request_id)

    def _start(self, req: TalkerRequest) -> None:
        rows = talker_prompt(self.model, req)  # [P, hidden]
        ids = [self.spec.codec["codec_pad_id"]] * rows.shape[0]  # placeholders: the rows are the input
        req.seq = self._add_sequence(req.request_id, ids, req.params, rows, talker_media(self.model, req, len(ids)),
                                     req.context, req.cache_salt)

    def extend_context(self, context_id: str, owner: str, token_ids, prompt_embeds=None, media=None,
                       request_id: str | None = None) -> str:
        raise InvalidArgument("the talker keeps contexts from its requests (ContextRequest.keep); it has no "
                              "extension of its own")

    def _feed(self, req: TalkerRequest, seq: Sequence) -> bool:
        """Completes the next input row if its text row is known; False while it is not."""
        source = req.text_source(req.generation_step)
        if source is None:
            return False
        if isinstance(source, int):
            text = self.model.text_projection(req.rows(source, source + 1))[0]
        else:
            bos, eos, pad = self.model.tts_rows()
            text = eos if source == "eos" else pad
        seq.input_embeds.append(req.pending + text)
        req.pending = None
        req.generation_step += 1
        return True

    # -- one step ----------------------------------------------------------------------
    def step(self) -> list[TalkerOutput]:
        failed, self._failed = self._failed, []
        return failed + super().step()

    def _outputs(self, batch: ScheduledBatch, sampled: list[int | None], out: ForwardOutput) -> list[TalkerOutput]:
        """One output per sequence that sampled: its frame, unless group 0 finished it."""
        seqs = [s for s, m in zip(batch.seqs, batch.sample_mask) if m]
        tokens = [t for t, m in zip(sampled, batch.sample_mask) if m]
        going = [i for i, s in enumerate(seqs) if not s.is_finished]
        hidden = out.sampled_hidden  # [len(seqs), hidden]
        frames = self._frames([seqs[i] for i in going], [tokens[i] for i in going], hidden[going]) if going else {}
        outputs = []
        for seq in seqs:
            outputs.append(TalkerOutput(seq.request_id, frames.get(seq.request_id), seq.is_finished,
                                        seq.finish_reason, seq.num_cached_prompt_tokens or 0, seq.kept_context_id,
                                        seq.num_prompt_tokens))
            if seq.is_finished:
                self.requests.pop(seq.request_id, None)
        return outputs

    def _frames(self, seqs: list[Sequence], tokens: list[int], hidden: torch.Tensor) -> dict[str, list[int]]:
        """Completes the step's frames in one code-predictor batch and queues each next input."""
        code0 = torch.tensor(tokens)
        code0_embed = self.model.codec_embed(code0)  # [B, hidden]
        residual, residual_sum = self.model.code_predictor.predict(
            hidden, code0_embed, lambda logits, k: self._pick(logits, k, seqs))
        frames = {}
        for i, seq in enumerate(seqs):
            req = self.requests[seq.request_id]
            req.pending = code0_embed[i] + residual_sum[i]
            req.num_frames += 1
            frames[seq.request_id] = [tokens[i], *residual[i].tolist()]
            if not self._feed(req, seq):
                self.park(seq.request_id)
        return frames

    def _pick(self, logits: torch.Tensor, k: int, seqs: list[Sequence]) -> torch.Tensor:
        """Code group k of each frame: greedy for greedy requests, else HF's predictor sampling."""
        picks = logits.argmax(dim=-1)
        for i, seq in enumerate(seqs):
            p = seq.params
            if p.greedy:
                continue
            row = top_p_filter(top_k_filter(logits[i], PREDICTOR_TOP_K), PREDICTOR_TOP_P)
            picks[i] = self.sampler.draw(row, p.seed, seq.num_output_tokens * 64 + k)
        return picks

    def check_integrity(self) -> None:
        super().check_integrity()
        started = {rid for rid, req in self.requests.items() if req.seq is not None}
        if started != self.scheduler.request_ids:
            raise IntegrityError(f"started talker requests {sorted(started)} are not the scheduler's "
                                 f"sequences {sorted(self.scheduler.request_ids)}")
        for rid in started:
            if self.requests[rid].seq is not self.scheduler.get(rid):
                raise IntegrityError(f"request {rid!r} and the scheduler hold different sequences")
