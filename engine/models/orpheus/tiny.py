"""A tiny random Orpheus checkpoint: a Llama with the Orpheus vocabulary layout
(156,940 ids, `llama3` rope scaling) written by transformers' LlamaForCausalLM, a byte
tokenizer whose begin/end-of-text ids are Llama 3's, and a tiny random SNAC 24 kHz
(same strides and hop, small widths) under `snac/` in safetensors.

Random weights would almost never speak, so the embeddings and the output head are
shaped into a bigram machine: a token of frame position g (and start-of-speech, for
g = -1) points the output towards position g + 1 mod 7, a text token towards text.
`margin` sets how strongly, `slip` how often a sampled token belongs to the position
after the expected one (accepted with an out-of-range code: it spoils its windows).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.models.orpheus import (BEGIN_OF_TEXT, CUSTOM_TOKEN_BASE, END_OF_SPEECH, END_OF_TEXT, START_OF_SPEECH,
                                   VOCAB_SIZE)
from engine.models.orpheus.audio_codes import CODEBOOK_SIZE, CODES_PER_FRAME, CUSTOM_OFFSET

SNAC_DIR = "snac"
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 128}
TEXT_DIRECTION = CODES_PER_FRAME  # basis vector 7 carries "text next"


@dataclass(frozen=True)
class TinyOrpheusSpec:
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    margin: float = 2.0          # weight of the expected frame position in the head
    slip: float = 0.8            # weight of the next position (accepted, out of range: a spoiled window)
    noise: float = 0.5           # spread inside a position (which code wins)
    rope: dict = field(default_factory=lambda: dict(LLAMA3_ROPE))
    snac_encoder_dim: int = 4    # latent 64
    snac_decoder_dim: int = 64
    snac_codebook_size: int = CODEBOOK_SIZE
    snac_depthwise: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size < TEXT_DIRECTION + 2:
            raise ValueError(f"hidden_size must be >= {TEXT_DIRECTION + 2}, got {self.hidden_size}")


def position_of(ids: torch.Tensor) -> torch.Tensor:
    """Frame position 0..6 of audio-carrying ids, -1 elsewhere (ids [V] int64)."""
    n = ids - CUSTOM_TOKEN_BASE - CUSTOM_OFFSET
    pos = torch.div(n, CODEBOOK_SIZE, rounding_mode="floor")
    return torch.where((n >= 0) & (pos < CODES_PER_FRAME), pos, torch.full_like(pos, -1))


@torch.no_grad()
def shape_bigram(model, spec: TinyOrpheusSpec, gen: torch.Generator) -> None:
    """Embedding of position g -> direction g + 1 mod 7; head rows of position h -> direction h."""
    hidden = spec.hidden_size
    ids = torch.arange(VOCAB_SIZE)
    pos = position_of(ids)
    is_text = pos < 0
    basis = torch.eye(hidden)
    nxt = torch.where(is_text, torch.full_like(pos, TEXT_DIRECTION), (pos + 1) % CODES_PER_FRAME)
    nxt[START_OF_SPEECH] = 0
    embed = basis[nxt] * 4.0 + torch.randn(VOCAB_SIZE, hidden, generator=gen) * 0.3
    embed[:, :TEXT_DIRECTION + 1] += torch.randn(VOCAB_SIZE, TEXT_DIRECTION + 1, generator=gen) * 0.05
    own = torch.where(is_text, torch.full_like(pos, TEXT_DIRECTION), pos)
    head = basis[own] * spec.margin + torch.randn(VOCAB_SIZE, hidden, generator=gen) * spec.noise
    is_audio = ~is_text
    head[is_audio] += basis[(pos[is_audio] - 1) % CODES_PER_FRAME] * spec.slip
    head[is_text, :TEXT_DIRECTION] -= spec.margin  # text is many ids: keep it from winning by count
    head[END_OF_SPEECH] = torch.randn(hidden, generator=gen) * spec.noise
    model.model.embed_tokens.weight.copy_(embed)
    model.lm_head.weight.copy_(head)


def build_lm(directory: Path, spec: TinyOrpheusSpec, seed: int) -> None:
    import transformers as tf

    config = tf.LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads, max_position_embeddings=2048, rms_norm_eps=1e-5,
        initializer_range=0.06, tie_word_embeddings=False, bos_token_id=BEGIN_OF_TEXT,
        eos_token_id=END_OF_SPEECH, pad_token_id=None, rope_parameters=dict(spec.rope))
    torch.manual_seed(seed)
    model = tf.LlamaForCausalLM(config).to(torch.float32).eval()
    shape_bigram(model, spec, torch.Generator().manual_seed(seed + 1))
    model.save_pretrained(str(directory), safe_serialization=True)


# Llama 3's chat format (the tokenizer adds begin-of-text itself).
LLAMA3_TEMPLATE = ("{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
                   "+ message['content'] + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def write_tokenizer(directory: Path) -> None:
    """Byte-level BPE (id == byte) plus Llama 3's begin/end-of-text ids; prepends begin-of-text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from engine.checkpoints.tiny_text import _byte_to_unicode

    chars = _byte_to_unicode()
    specials = {"<|begin_of_text|>": BEGIN_OF_TEXT, "<|end_of_text|>": BEGIN_OF_TEXT + 1, "<|eot_id|>": END_OF_TEXT}
    vocab = {chars[b]: b for b in range(256)} | specials
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(specials))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", BEGIN_OF_TEXT)])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                            chat_template=LLAMA3_TEMPLATE).save_pretrained(str(directory))


def build_snac(directory: Path, spec: TinyOrpheusSpec, seed: int) -> None:
    """Random SNAC decoder weights, stored as the `snac` package's weight-norm pairs."""
    from safetensors.torch import save_file

    from engine.models.snac.config import CONFIG_FILE, WEIGHTS_FILE, SnacConfig
    from engine.models.snac.model import SnacDecoder

    config = SnacConfig(encoder_dim=spec.snac_encoder_dim, decoder_dim=spec.snac_decoder_dim,
                        codebook_size=spec.snac_codebook_size, depthwise=spec.snac_depthwise)
    torch.manual_seed(seed)
    model = SnacDecoder(config)
    tensors = {}
    for name, t in model.state_dict().items():
        module = name.rsplit(".", 1)[0]
        if name.endswith(".weight") and t.dim() == 3:  # a conv: store (g, v) as weight norm does
            g = torch.norm_except_dim(t, 2, 0)
            tensors[module + ".parametrizations.weight.original0"] = g.contiguous()
            tensors[module + ".parametrizations.weight.original1"] = t.contiguous()
        elif name.endswith("alpha"):
            tensors[name] = (1.0 + 0.2 * torch.randn_like(t)).contiguous()
        else:
            tensors[name] = t.contiguous()
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / WEIGHTS_FILE))
    (directory / CONFIG_FILE).write_text(json.dumps(config.as_json(), indent=1))


def make_tiny_orpheus(directory: str | Path, *, seed: int = 0, spec: TinyOrpheusSpec = TinyOrpheusSpec()) -> Path:
    """`starmesh make-tiny orpheus DIR`: LM + tokenizer at DIR, SNAC at DIR/snac."""
    directory = Path(directory)
    build_lm(directory, spec, seed)
    write_tokenizer(directory)
    build_snac(directory / SNAC_DIR, spec, seed)
    return directory
