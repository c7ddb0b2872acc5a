"""Text decode of BAGEL's understanding expert on the paged-KV engine (LLMEngine over the
backbone loaded from `starmesh make-tiny bagel`) equals transformers' Qwen3 causal LM
(q/k/v biases, o_proj's zero) with the same tensors, greedy, prompts framed as upstream
frames a text input and starts a decode: <|im_start|> text <|im_end|> <|im_start|>."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from cluster.registry import build_tiny
from engine.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.models.bagel.loader import load_backbone
from engine.models.bagel.tiny import TOKEN_IDS
from engine.sampling_params import SamplingParams
from tests.engine.bagel.test_backbone import hf_reference

BOS, EOS = TOKEN_IDS["<|im_start|>"], TOKEN_IDS["<|im_end|>"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny("bagel", tmp_path_factory.mktemp("bagel") / "tiny", seed=2)


def _framed(text: bytes) -> list[int]:
    return [BOS, *text, EOS, BOS]


def test_engine_greedy_decode_equals_transformers(tiny):
    import json

    llm = json.loads((tiny / "llm_config.json").read_text())
    reference = hf_reference(load_file(str(tiny / "ema.safetensors")), llm)
    prompts = [_framed(b"describe the image"), _framed(b"a red cube on a table, in the evening"), _framed(b"hi")]
    expected = []
    for prompt in prompts:
        with torch.no_grad():
            out = reference.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=EOS,
                                     pad_token_id=0)
        expected.append(out[0, len(prompt):].tolist())
    model = load_backbone(tiny)
    engine = LLMEngine(model, EngineConfig(checkpoint=str(tiny), block_size=4, num_blocks=64, prefill_chunk_size=8))
    got = engine.generate(prompts, SamplingParams(max_new_tokens=8, eos_token_ids=model.config.eos_token_ids))
    assert got == expected
