"""The Orpheus LM on the engine equals transformers' LlamaForCausalLM.generate on the tiny
checkpoints (llama3 rope scaling, the Orpheus vocabulary), greedy and seeded with the
released sampling defaults; the prompt layout is the reference's."""
from __future__ import annotations

import pytest
import torch

from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.orpheus import END_OF_SPEECH, VOCAB_SIZE
from engine.models.orpheus.audio_codes import audio_codes
from engine.models.orpheus.prompt import speech_prompt_ids
from engine.sampler import seeded_generator
from engine.sampling_params import SamplingParams
from tests.fixtures.tiny_orpheus import CONFIGS, ORPHEUS_SAMPLING, checkpoint, hf_lm

TEXTS = [("tara", "Hello there"), ("leo", "abc")]
NUM_NEW = 48


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def config(request):
    return request.param


@pytest.fixture(scope="module")
def engine(config):
    return LLMEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint(config), num_blocks=64, block_size=16))


def prompts(config):
    return [speech_prompt_ids(checkpoint(config), text, voice) for voice, text in TEXTS]


def test_the_checkpoint_has_the_orpheus_layout(config):
    import json

    cfg = json.load(open(f"{checkpoint(config)}/config.json"))
    assert cfg["vocab_size"] == VOCAB_SIZE and cfg["rope_parameters"]["rope_type"] == "llama3"
    ids = prompts(config)[0]
    assert ids[:2] == [128259, 128000] and ids[-4:] == [128009, 128260, 128261, 128257]
    assert ids[2:-4] == list(b"tara: Hello there")  # the tiny tokenizer's ids are the bytes


def test_greedy_equals_transformers_generate(config, engine):
    for prompt in prompts(config):
        ours = engine.generate([prompt], SamplingParams(max_new_tokens=NUM_NEW, eos_token_ids=(END_OF_SPEECH,)))[0]
        with torch.no_grad():
            hf = hf_lm(config).generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=NUM_NEW)
        assert ours == hf[0, len(prompt):].tolist()
        assert len(audio_codes(ours)) >= 28  # the tiny LM speaks: at least one window


def hf_seeded(config, prompt, seed):
    """HF sampling whose draw number i comes from seeded_generator(seed, i), over the ids of
    nonzero probability in id order, as the engine draws (HF's own probabilities)."""
    real, calls = torch.multinomial, [0]

    def multinomial(probs, num_samples, *args, **kwargs):
        gen = seeded_generator(seed, calls[0])
        calls[0] += 1
        support = torch.nonzero(probs.reshape(-1)).flatten()
        return support[real(probs.reshape(-1)[support], num_samples, generator=gen)].reshape(probs.shape[0], num_samples)

    torch.multinomial = multinomial
    try:
        with torch.no_grad():
            out = hf_lm(config).generate(torch.tensor([prompt]), do_sample=True, top_k=0, max_new_tokens=NUM_NEW,
                                         **ORPHEUS_SAMPLING)
    finally:
        torch.multinomial = real
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("seed", [11])
def test_seeded_sampling_equals_transformers_generate(config, engine, seed):
    params = SamplingParams(max_new_tokens=NUM_NEW, seed=seed, eos_token_ids=(END_OF_SPEECH,), **ORPHEUS_SAMPLING)
    batch = prompts(config)
    ours = engine.generate(batch, params)  # batched: each request still draws from its own generator
    for prompt, got in zip(batch, ours):
        assert got == hf_seeded(config, prompt, seed)
