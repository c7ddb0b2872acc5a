"""The talker engine: the paged KV-cache engine of [C] running the Qwen3-Omni talker.

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
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.device_option import resolve_device
from engine.llm_engine import EngineConfig
from engine.model_runner import ModelRunner
from engine.models.qwen3_omni.talker import Talker
from engine.sampler import Sampler, seeded_generator, top_k_filter, top_p_filter
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.models.qwen3_omni.talker_prompt import talker_prompt
from engine.talker_request import TalkerRequest
from core.errors import InvalidArgument

PREDICTOR_TOP_K, PREDICTOR_TOP_P = 50, 0.8  # what HF's talker passes its code predictor when sampling


@dataclass
class TalkerOutput:
    request_id: str
    frame: list[int] | None = None   # G codes of one audio frame (group 0 first)
    is_finished: bool = False
    finish_reason: str | None = None


class TalkerEngine:
    def __init__(self, model: Talker, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self.spec = model.spec
        if resolve_device(config.device).type != "cpu":  # its runner and code predictor are CPU-only for now
            raise InvalidArgument(f"engine.device {config.device!r}: the talker engine runs on 'cpu' only")
        self.scheduler = Scheduler(config.scheduler_config)
        self.runner = ModelRunner(model, config.num_blocks, config.block_size)
        self.sampler = Sampler()
        self.requests: dict[str, TalkerRequest] = {}
        self.sequences: dict[str, Sequence] = {}
        self._arrival = 0
        self._failed: list[TalkerOutput] = []
        self.num_steps = 0
        self.forward_s = 0.0

    @classmethod
    def from_checkpoint(cls, config: EngineConfig) -> "TalkerEngine":
        from engine.models.qwen3_omni.talker_loader import load_talker

        return cls(load_talker(config.checkpoint, dtype=config.dtype), config)

    @property
    def max_context(self) -> int:
        return min(self.spec.decoder.max_position, self.config.num_blocks * self.config.block_size)

    def talker_params(self, max_new_tokens: int = 4096, temperature: float = 0.9, top_k: int = 50,
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
                    embeds: torch.Tensor | None = None, hidden: torch.Tensor | None = None) -> None:
        """Opens a request from the thinker's prompt ids and (some of) its rows [n, thinker_hidden]."""
        if request_id in self.requests:
            raise InvalidArgument(f"request_id {request_id!r} is already on the talker")
        req = TalkerRequest(request_id, prompt_ids, params, self.spec.speaker_id(speaker), self.spec.tokens)
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
        if self.sequences.pop(request_id, None) is not None:
            self.scheduler.abort(request_id)
        self._failed = [o for o in self._failed if o.request_id != request_id]

    def has_work(self) -> bool:
        return bool(self._failed) or self.scheduler.has_work()

    def _get(self, request_id: str) -> TalkerRequest:
        req = self.requests.get(request_id)
        if req is None:
            raise InvalidArgument(f"request {request_id!r} is not on the talker")
        return req

    def _advance(self, req: TalkerRequest) -> None:
        """Starts the request once its prompt is complete; feeds a waiting text row."""
        if not req.started:
            if req.never_starts:
                self.abort(req.request_id)
                self._failed.append(TalkerOutput(req.request_id, None, True, "no_text"))
            elif req.can_start:
                self._start(req)
            return
        seq = self.sequences.get(req.request_id)
        if seq is not None and req.pending is not None and self._feed(req, seq):
            self.scheduler.unpark(req.request_id)

    def _start(self, req: TalkerRequest) -> None:
        rows = talker_prompt(self.model, req)  # [P, hidden]
        ids = [self.spec.codec["codec_pad_id"]] * rows.shape[0]  # placeholders: the rows are the input
        seq = Sequence(req.request_id, ids, req.params, self._arrival, self.max_context,
                       self.spec.decoder.vocab_size, rows)
        self._arrival += 1
        self.scheduler.add(seq)
        self.sequences[req.request_id] = seq
        req.started = True

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
    @torch.no_grad()
    def step(self) -> list[TalkerOutput]:
        outputs, self._failed = self._failed, []
        batch = self.scheduler.schedule()                              # schedule
        if not batch.seqs:
            return outputs
        t0 = time.perf_counter()
        out = self.runner.run(batch, self.scheduler.pool)               # run
        self.forward_s += time.perf_counter() - t0
        sampling = [s for s, m in zip(batch.seqs, batch.sample_mask) if m]
        tokens = self.sampler(out.logits, sampling)
        it = iter(tokens)
        self.scheduler.postprocess(batch, [next(it) if m else None for m in batch.sample_mask])
        self.num_steps += 1
        return outputs + self._postprocess(sampling, tokens, out.sampled_hidden)  # postprocess

    def _postprocess(self, seqs: list[Sequence], tokens: list[int], hidden: torch.Tensor) -> list[TalkerOutput]:
        going = [i for i, s in enumerate(seqs) if not s.is_finished]
        frames = self._frames([seqs[i] for i in going], [tokens[i] for i in going], hidden[going]) if going else {}
        outputs = []
        for seq, token in zip(seqs, tokens):
            frame = frames.get(seq.request_id)
            outputs.append(TalkerOutput(seq.request_id, frame, seq.is_finished, seq.finish_reason))
            if seq.is_finished:
                self.sequences.pop(seq.request_id, None)
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
                self.scheduler.park(seq.request_id)
        return frames

    def _pick(self, logits: torch.Tensor, k: int, seqs: list[Sequence]) -> torch.Tensor:
        """Code group k of each frame: greedy for greedy requests, else HF's predictor sampling."""
        picks = logits.argmax(dim=-1)
        for i, seq in enumerate(seqs):
            p = seq.params
            if p.greedy:
                continue
            row = top_p_filter(top_k_filter(logits[i], PREDICTOR_TOP_K), PREDICTOR_TOP_P)
            gen = None if p.seed is None else seeded_generator(p.seed, seq.num_output_tokens * 64 + k)
            picks[i] = torch.multinomial(torch.softmax(row, -1), 1, generator=gen or self.sampler._rng)[0]
        return picks

    def check_integrity(self) -> None:
        self.scheduler.check_integrity()
        assert set(self.sequences) <= set(self.requests), "a sequence outlived its request"
