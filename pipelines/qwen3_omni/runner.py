"""The three Qwen3-Omni components in one process, no services: the fidelity baseline of
the mesh and its in-process throughput reference.

Each round reads: thinker step -> its rows to the talker; talker step -> frames into
each request's LeftContext(C, L) buffer; every window that is ready -> code2wav. So the
talker starts on the thinker's first text token, and audio on the first full window,
exactly as the mesh streams them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.qwen3_omni import THINKER_PART
from engine.sampling_params import SamplingParams
from engine.models.qwen3_omni.talker_engine import TalkerEngine
from engine.models.qwen3_omni.talker_request import set_videos
from graph.chunking import LeftContext
from graph.stream_buffer import StreamBuffer
from pipelines.qwen3_omni.requests import SpeechRequest, SpeechResult
from core.errors import InvalidArgument


@dataclass
class _Live:
    request: SpeechRequest
    result: SpeechResult
    frames: StreamBuffer
    text_done: bool = False
    talker_done: bool = False   # codec EOS may come before the thinker's EOS: text goes on
    audio_done: bool = False

    @property
    def is_done(self) -> bool:
        return self.text_done and self.audio_done


class SpeechRunner:
    def __init__(self, thinker: LLMEngine, talker: TalkerEngine, code2wav) -> None:
        self.thinker = thinker
        self.talker = talker
        self.code2wav = code2wav
        self.live: dict[str, _Live] = {}

    @classmethod
    def from_checkpoint(cls, checkpoint: str, num_blocks: int = 512, block_size: int = 16) -> "SpeechRunner":
        from engine.models.qwen3_omni.code2wav import Code2Wav
        from engine.models.qwen3_omni.talker_loader import read_talker_spec

        spec = read_talker_spec(checkpoint)
        thinker = LLMEngine.from_checkpoint(EngineConfig(
            checkpoint=checkpoint, num_blocks=num_blocks, block_size=block_size,
            capture_layer=spec.accept_hidden_layer, return_embeddings=True, text_part=THINKER_PART))
        talker = TalkerEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, num_blocks=num_blocks,
                                                           block_size=block_size))
        return cls(thinker, talker, Code2Wav.from_checkpoint(checkpoint))

    def add(self, req: SpeechRequest) -> None:
        if req.request_id in self.live:
            raise InvalidArgument(f"request_id {req.request_id!r} is already running")
        text = SamplingParams(max_new_tokens=req.max_text_tokens, temperature=req.text_temperature,
                              seed=req.seed, eos_token_ids=self.thinker.model.config.eos_token_ids,
                              stop_token_ids=req.text_stop_ids)
        talk = self.talker.talker_params(
            max_new_tokens=req.max_frames, temperature=req.talker_temperature, top_k=req.talker_top_k,
            top_p=req.talker_top_p, repetition_penalty=req.repetition_penalty, seed=req.seed,
            min_new_tokens=req.min_frames)
        grids = req.media.image_grids if req.media is not None else ()
        self.talker.add_request(req.request_id, list(req.prompt_ids), talk, req.speaker, image_grids=grids)
        if req.media is not None:
            set_videos(self.talker.requests[req.request_id], req.media.video_grids, req.media.video_seconds)
        try:
            self.thinker.add_request(req.request_id, list(req.prompt_ids), text, media=req.media)
        except Exception:
            self.talker.abort(req.request_id)
            raise
        policy = LeftContext(req.chunk_size, req.left_context, first=req.first_chunk)
        buffer = StreamBuffer(policy, policy.min_buffer + req.max_frames, name=f"{req.request_id} frames")
        self.live[req.request_id] = _Live(req, SpeechResult(req.request_id), buffer)

    def has_work(self) -> bool:
        return bool(self.live)

    def step(self) -> list[SpeechResult]:
        """One round of all three components; returns the requests that finished in it."""
        self._thinker_step()
        self._talker_step()
        self._codec_step()
        done = [rid for rid, lv in self.live.items() if lv.is_done]
        return [self.live.pop(rid).result for rid in done]

    def generate(self, requests: list[SpeechRequest],
                 on_step: Callable[[list[SpeechResult]], None] | None = None) -> list[SpeechResult]:
        """Runs `requests` to the end; their results in request order. on_step: called after
        every step with those results as they stand (a benchmark's clock reads them)."""
        for req in requests:
            self.add(req)
        results = [self.live[req.request_id].result for req in requests]  # filled in place as they step
        while self.has_work():
            self.step()
            if on_step is not None:
                on_step(results)
        return results

    def _thinker_step(self) -> None:
        for out in self.thinker.step():
            lv = self.live.get(out.request_id)
            if lv is None:
                continue
            if out.token_id is not None:
                lv.result.text_ids.append(out.token_id)
            lv.text_done = out.is_finished
            if lv.talker_done:
                continue
            self.talker.push_thinker(out.request_id, out.embeds, out.hidden)  # rows fed this step
            if out.is_finished:
                self.talker.end_thinker(out.request_id)

    def _talker_step(self) -> None:
        for out in self.talker.step():
            lv = self.live.get(out.request_id)
            if lv is None:
                continue
            if out.frame is not None:
                lv.result.frames.append(out.frame)
                lv.frames.push([out.frame])
            if out.is_finished:
                lv.talker_done = True
                lv.result.finish_reason = out.finish_reason
                lv.frames.finish()

    def _codec_step(self) -> None:
        for lv in self.live.values():
            for chunk in lv.frames.pop_ready():
                if chunk.new_items:
                    codes = torch.tensor(chunk.items, dtype=torch.int64)  # [T, G]
                    lv.result.chunks.append(self.code2wav.decode_window(codes, chunk.num_context))
                lv.audio_done = chunk.is_last
