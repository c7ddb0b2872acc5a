"""The Orpheus benchmark's baselines, in this process at one thread:

- non-streaming: the in-process runner generating every token and only then decoding
  every window (pipelines.orpheus.runner, stream=False): its time to first audio;
- transformers: LlamaForCausalLM.generate (stop id suppressed, as in the mesh) then SNAC
  decode of every window, requests one after another: its audio seconds per second.
Both sample as the mesh's requests do (Orpheus' defaults: temperature 0.6, top-p 0.8,
repetition penalty 1.3).
"""
from __future__ import annotations

import statistics
import time

import torch

from engine.models.orpheus import (DEFAULT_REPETITION_PENALTY, DEFAULT_TEMPERATURE, DEFAULT_TOP_P,
                                   END_OF_SPEECH, SAMPLE_RATE)
from engine.models.orpheus.audio_codes import audio_codes
from engine.models.orpheus.windows import EMIT_END, EMIT_START, reference_windows, snac_levels

SAMPLING = {"temperature": DEFAULT_TEMPERATURE, "top_p": DEFAULT_TOP_P, "repetition_penalty": DEFAULT_REPETITION_PENALTY}


def lm_step_ms(checkpoint: str, prompt: list[int], num_tokens: int = 64) -> float:
    """One request's decode step on the engine at one thread (sampling included), median."""
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, num_blocks=64, block_size=16))
    engine.add_request("step", prompt, SamplingParams(max_new_tokens=num_tokens, suppress_token_ids=(END_OF_SPEECH,),
                                                      seed=0, **SAMPLING))
    engine.step()  # the prefill
    times = []
    while engine.has_work():
        t0 = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def nonstreaming_ttfa_ms(checkpoint: str, prompts: list[list[int]], num_tokens: int, num_requests: int) -> float:
    """Median time to first audio when audio is decoded after the whole generation."""
    from engine.sampling_params import SamplingParams
    from pipelines.orpheus.runner import OrpheusRunner

    runner = OrpheusRunner.from_checkpoint(checkpoint, num_blocks=256, block_size=16)
    params = SamplingParams(max_new_tokens=num_tokens, suppress_token_ids=(END_OF_SPEECH,), seed=0,
                            eos_token_ids=(END_OF_SPEECH,), **SAMPLING)
    ttfa = []
    for i in range(num_requests):
        result = runner.generate([(f"ns{i}", prompts[i % len(prompts)], params)], stream=False)[0]
        ttfa.append(1000 * result.chunk_times_s[0])
    return statistics.median(ttfa)


@torch.no_grad()
def hf_audio_s_per_s(checkpoint: str, prompts: list[list[int]], num_tokens: int, num_requests: int) -> float:
    import transformers as tf

    from engine.models.snac.model import SnacDecoder

    lm = tf.LlamaForCausalLM.from_pretrained(checkpoint).eval()
    snac = SnacDecoder.from_checkpoint(f"{checkpoint}/snac")
    audio_s, t0 = 0.0, time.perf_counter()
    for i in range(num_requests):
        prompt = prompts[i % len(prompts)]
        torch.manual_seed(i)
        out = lm.generate(torch.tensor([prompt]), do_sample=True, top_k=0, max_new_tokens=num_tokens,
                          min_new_tokens=num_tokens, suppress_tokens=[END_OF_SPEECH], **SAMPLING)
        windows = [w for _, w in reference_windows(audio_codes(out[0, len(prompt):].tolist()))]
        if windows:
            audio = snac.decode(snac_levels(torch.stack(windows)), None)[:, EMIT_START:EMIT_END]
            audio_s += audio.numel() / SAMPLE_RATE
    return audio_s / (time.perf_counter() - t0)
