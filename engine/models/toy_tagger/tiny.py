"""A tiny random toy-tagger checkpoint (engine.models.toy_tagger.model layout), built
offline from a seed: config.json, model.safetensors and the labels' tokenizer.

Six labels of byte classes, named so a tagged prompt reads as words; the weights are
random, so the tags are not the classes: they are what these weights compute, which is
what the fidelity tests check.
"""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.models.toy_tagger.model import NUM_BYTES, TaggerConfig

LABELS = ("upper", "lower", "digit", "space", "punct", "other")


def random_state(config: TaggerConfig, seed: int) -> dict[str, torch.Tensor]:
    """The tagger's tensors drawn from `seed` (its own generator: the global RNG is left
    alone). Linear weights ~ N(0, 1 / fan_in) keep the logits O(1), so every label wins
    for some bytes."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    e, h, num_labels = config.embed_dim, config.hidden_dim, len(config.labels)
    return {"embed.weight": normal(NUM_BYTES, e, std=1.0),
            "hidden.weight": normal(h, e, std=e ** -0.5), "hidden.bias": normal(h, std=0.1),
            "out.weight": normal(num_labels, h, std=h ** -0.5), "out.bias": normal(num_labels, std=0.1)}


def write_label_tokenizer(directory: Path, labels: tuple[str, ...]) -> None:
    """tokenizer.json + tokenizer_config.json whose vocabulary is `labels` (id i = labels[i]):
    what the conductor loads to decode tag ids (conductor.tokenizer); decoding joins the
    words with spaces. The model never tokenizes its input (it reads UTF-8 bytes)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {label: i for i, label in enumerate(labels)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=labels[-1]))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(directory))


def make_tiny_tagger(directory: str | Path, seed: int = 0, embed_dim: int = 16, hidden_dim: int = 32) -> Path:
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = TaggerConfig(embed_dim, hidden_dim, LABELS)
    config.write(path)
    save_file(random_state(config, seed), str(path / "model.safetensors"))
    write_label_tokenizer(path, LABELS)
    return path
