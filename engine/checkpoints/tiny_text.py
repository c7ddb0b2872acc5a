"""Tiny random Hugging Face checkpoints for tests, written by transformers' own classes.

`make_tiny(family, dir, **overrides)` builds Qwen3ForCausalLM / Qwen3MoeForCausalLM /
LlamaForCausalLM (or, given a callable instead of a family, the model it builds from the
config fields: a composite checkpoint's builder, in its model's folder) with a fixed seed in fp32 and saves it with `save_pretrained(safe_serialization=True)`.
Overrides are config fields (e.g. num_hidden_layers=3, tie_word_embeddings=True); `sharded`
writes several shards plus model.safetensors.index.json; `with_tokenizer` adds a byte-level
tokenizer whose 256 ids are the 256 bytes. No network access is needed.
"""
from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ("qwen3", "qwen3_moe", "llama")

BASE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
            initializer_range=0.05, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
            pad_token_id=None)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
SHARD_BYTES = 64 * 1024


def _model(family, overrides: dict):
    import transformers as tf

    if callable(family):  # a composite model's builder: config fields -> model
        return family(overrides)
    if family == "qwen3":
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(**{**BASE, **overrides}))
    if family == "qwen3_moe":
        return tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(**{**BASE, **MOE, **overrides}))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**{**BASE, **overrides}))
    raise ValueError(f"make_tiny: family {family!r} is not one of {FAMILIES}")


# Qwen's ChatML as a chat template: each turn, then the assistant's turn opened.
CHATML_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                   "{% endif %}")


def write_byte_tokenizer(directory: str | Path) -> None:
    """A byte-level BPE tokenizer without merges: token id == byte value (256 ids), with
    the ChatML chat template (its markers are plain bytes here)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = _byte_to_unicode()
    vocab = {byte_chars[b]: b for b in range(256)}
    assert set(vocab) == set(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, chat_template=CHATML_TEMPLATE).save_pretrained(str(directory))


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel pre-tokenizes to)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def make_tiny(family, directory: str | Path, *, sharded: bool = False, with_tokenizer: bool = False,
              seed: int = 0, **overrides) -> Path:
    """Write a tiny random fp32 checkpoint of `family` (a FAMILIES name, or a callable
    building the model from the config fields) to `directory`; returns the path."""
    directory = Path(directory)
    torch.manual_seed(seed)
    model = _model(family, dict(overrides)).to(torch.float32).eval()
    kwargs = {"max_shard_size": SHARD_BYTES} if sharded else {}
    model.save_pretrained(str(directory), safe_serialization=True, **kwargs)
    if with_tokenizer:
        write_byte_tokenizer(directory)
    return directory


def make_tiny_text(directory: str | Path, *, kind: str = "qwen3", seed: int = 0) -> Path:
    """`starmesh make-tiny` for the text families: with a tokenizer, so --prompt works."""
    return make_tiny(kind.replace("-", "_"), directory, seed=seed, with_tokenizer=True)
