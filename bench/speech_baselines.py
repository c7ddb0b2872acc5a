"""The speech benchmark's baselines, in this process (one torch thread):

- in-process: pipelines.qwen3_omni.runner.SpeechRunner (thinker, talker and code2wav
  stepped in one loop, the same chunking as the mesh), all requests of a wave at once:
  its audio rate, and its first-audio times (what a wave's first windows cost in compute
  alone, the reference for the mesh's own);
- transformers: Qwen3OmniMoeForConditionalGeneration.generate(return_audio=True), one
  request after another. Its codec EOS is suppressed as on the mesh: generate passes
  `talker_*` keyword arguments on to the talker's own generate, so talker_min_new_tokens
  becomes a MinNewTokensLengthLogitsProcessor on the codec EOS id (the talker's
  eos_token_id), and talker_max_new_tokens = talker_min_new_tokens fixes the length.
"""
from __future__ import annotations

import statistics
import time

from bench.speech_mesh import CHUNK, FIRST, LEFT

SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 frames per second


def inprocess_speech(checkpoint: str, prompts: list[list[int]], text_tokens: int, frames: int,
                     concurrency: int, rounds: int, first_chunk: int = FIRST) -> dict:
    """`rounds` waves of `concurrency` requests through SpeechRunner: audio seconds per
    wall second, each request's first audio (ms from its wave's start to the end of
    the step that decoded its first window), and CPU seconds per audio second (this
    process's CPU over the waves: nothing else runs in it meanwhile). This is the compute
    a wave needs with no mesh around it: one process, one thread, the three components
    stepped in turn."""
    from pipelines.qwen3_omni.requests import SpeechRequest
    from pipelines.qwen3_omni.runner import SpeechRunner

    runner = SpeechRunner.from_checkpoint(checkpoint)

    def wave(tag: str, n: int, offset: int, num_frames: int) -> tuple[list, list[float]]:
        reqs = [SpeechRequest(f"{tag}{i}", prompts[(offset + i) % len(prompts)], max_text_tokens=text_tokens,
                              max_frames=num_frames + 1, min_frames=num_frames + 1, chunk_size=CHUNK,
                              left_context=LEFT, first_chunk=first_chunk) for i in range(n)]
        return timed_generate(runner, reqs)

    wave("warm", 1, 0, 8)
    audio_s, wall, cpu, ttfa = 0.0, 0.0, 0.0, []
    for r in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        results, first_ms = wave(f"r{r}-", concurrency, r * concurrency, frames)
        wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
        if any(len(res.frames) != frames for res in results):
            raise RuntimeError(f"in-process: expected {frames} frames per request")
        audio_s += sum(res.audio.numel() for res in results) / 24000
        ttfa += first_ms
    ttfa.sort()
    return {"audio_s_per_s": audio_s / wall, "ttfa_ms_p50": statistics.median(ttfa), "ttfa_ms_max": ttfa[-1],
            "cpu_s_per_audio_s": cpu / audio_s}


def timed_generate(runner, requests: list) -> tuple[list, list[float]]:
    """SpeechRunner.generate, and when each request's first audio window came out (ms from
    the start, at the end of the step that decoded it)."""
    t0, first_ms = time.perf_counter(), {}

    def seen(results: list) -> None:
        now_ms = (time.perf_counter() - t0) * 1e3
        for r in results:
            if r.chunks:
                first_ms.setdefault(r.request_id, now_ms)

    results = runner.generate(requests, on_step=seen)
    return results, [first_ms[r.request_id] for r in requests]


def hf_audio_s_per_s(checkpoint: str, prompts: list[list[int]], text_tokens: int, frames: int,
                     requests: int) -> float:
    """Audio seconds per wall second of `requests` greedy generate calls in a row."""
    import torch
    import transformers as tf

    from engine.models.qwen3_omni.tiny import TOKENS

    model = tf.Qwen3OmniMoeForConditionalGeneration.from_pretrained(checkpoint, dtype=torch.float32).eval()

    def one(ids: list[int], num_frames: int) -> float:
        # talker steps = frames + 1: its last step yields no frame, as on the mesh
        _, wav = model.generate(
            input_ids=torch.tensor([ids]), return_audio=True, speaker="ethan", thinker_max_new_tokens=text_tokens,
            thinker_eos_token_id=[TOKENS["<|im_end|>"]], thinker_do_sample=False, talker_do_sample=False,
            talker_max_new_tokens=num_frames + 1, talker_min_new_tokens=num_frames + 1)
        got = round(wav.numel() / SAMPLES_PER_FRAME)  # code2wav trims a few hundred samples per window
        if got != num_frames:
            raise RuntimeError(f"transformers: ~{got} frames of audio, expected {num_frames} (codec EOS?)")
        return wav.numel() / 24000

    with torch.inference_mode():
        one(prompts[0], 8)  # warm-up
        t0 = time.perf_counter()
        audio_s = sum(one(prompts[i % len(prompts)], frames) for i in range(requests))
        return audio_s / (time.perf_counter() - t0)
