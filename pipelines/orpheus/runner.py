"""The Orpheus walk in one process, no services: the LM engine, the code rule and SNAC,
stepped together. Each round reads: one LM step -> each new token through its request's
code counter -> accepted codes into its SlidingWindow(28, 7) buffer -> every regular,
valid window of every request decoded as one SNAC batch. So audio starts on the 28th
accepted code, exactly as the mesh streams it; `stream=False` decodes only once every
request has finished (the non-streaming baseline).
"""
from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field

import torch

from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.orpheus.audio_codes import AudioCodeCounter
from engine.models.orpheus.windows import (EMIT_END, EMIT_START, STRIDE_CODES, WINDOW_CODES, is_regular, is_valid,
                                           snac_levels, window_noise_seed)
from engine.models.snac.model import SnacDecoder
from engine.sampling_params import SamplingParams
from graph.chunking import SlidingWindow
from graph.stream_buffer import StreamBuffer


@dataclass
class OrpheusResult:
    request_id: str
    token_ids: list[int] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    chunks: list[torch.Tensor] = field(default_factory=list)   # float32 [2048] each, in order
    chunk_times_s: list[float] = field(default_factory=list)   # since generate() began


@dataclass
class _Live:
    result: OrpheusResult
    seed: int
    counter: AudioCodeCounter = field(default_factory=AudioCodeCounter)
    buffer: StreamBuffer = field(default_factory=lambda: StreamBuffer(SlidingWindow(WINDOW_CODES, STRIDE_CODES), 1 << 20))


class OrpheusRunner:
    def __init__(self, engine: LLMEngine, snac: SnacDecoder, max_batch_size: int = 16) -> None:
        self.engine = engine
        self.snac = snac
        self.max_batch_size = max_batch_size

    @classmethod
    def from_checkpoint(cls, checkpoint: str, snac_dir: str | None = None, **engine_options) -> "OrpheusRunner":
        from pathlib import Path

        engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, **engine_options))
        return cls(engine, SnacDecoder.from_checkpoint(snac_dir or str(Path(checkpoint) / "snac")))

    def generate(self, requests: list[tuple[str, list[int], SamplingParams]], stream: bool = True) -> list[OrpheusResult]:
        """requests: (request id, prompt ids, sampling params); a window's noise is seeded from
        params.seed (else the request id's crc32), as the snac component seeds it."""
        t0 = time.perf_counter()
        live = {}
        for rid, prompt, params in requests:
            self.engine.add_request(rid, prompt, params)
            seed = params.seed if params.seed is not None else zlib.crc32(rid.encode())
            live[rid] = _Live(OrpheusResult(rid), seed)
        windows: list[tuple[_Live, torch.Tensor, int]] = []
        while self.engine.has_work():
            for out in self.engine.step():
                if out.token_id is not None:
                    windows += self._feed(live[out.request_id], out.token_id, out.is_finished)
            if stream:
                self._decode(windows, t0)
                windows = []
        self._decode(windows, t0)
        return [live[rid].result for rid, _, _ in requests]

    def _feed(self, run: _Live, token: int, is_finished: bool) -> list[tuple[_Live, torch.Tensor, int]]:
        run.result.token_ids.append(token)
        code = run.counter.accept(token)
        if code is not None:
            run.result.codes.append(code)
            run.buffer.push([code])
        if is_finished:
            run.buffer.finish()
        out = []
        for chunk in run.buffer.pop_ready():
            codes = torch.tensor(chunk.items, dtype=torch.int64)
            if is_regular(len(chunk.items), chunk.num_context, chunk.start) and is_valid(codes):
                out.append((run, codes, chunk.end))
        return out

    def _decode(self, windows: list[tuple[_Live, torch.Tensor, int]], t0: float) -> None:
        for i in range(0, len(windows), self.max_batch_size):
            batch = windows[i:i + self.max_batch_size]
            seeds = [window_noise_seed(run.seed, end) for run, _, end in batch] if self.snac.config.noise else None
            audio = self.snac.decode(snac_levels(torch.stack([w for _, w, _ in batch])), seeds)
            now = time.perf_counter() - t0
            for (run, _, _), a in zip(batch, audio):
                run.result.chunks.append(a[EMIT_START:EMIT_END].float().clone())
                run.result.chunk_times_s.append(now)
