"""The toy byte tagger: every byte of a UTF-8 prompt gets one label.

    bytes uint8 [n] -> embed [n, E] -> Linear(E, H) -> GELU -> Linear(H, L) -> logits [n, L]
    tags = argmax over the L labels -> int64 [n] (label ids; ties go to the lower id)

Each byte is tagged on its own (no context), so the bytes of several requests run as one
[sum n] batch and split back per request.

A checkpoint is a directory: config.json (TaggerConfig's fields, nothing else: a
`model_type` would make transformers warn while the conductor loads the tokenizer),
model.safetensors (`embed.weight` [256, E], `hidden.weight` [H, E], `hidden.bias` [H],
`out.weight` [L, H], `out.bias` [L]; read with safetensors, never pickle) and a
tokenizer whose vocabulary is the labels (id i = labels[i]), so the conductor decodes
the tags into the words a client reads.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from core.errors import InvalidArgument

NUM_BYTES = 256  # the vocabulary: one embedding row per byte value


@dataclass(frozen=True)
class TaggerConfig:
    embed_dim: int
    hidden_dim: int
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("embed_dim", "hidden_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
                raise InvalidArgument(f"config.{name} must be an int in [1, 4096], got {value!r}")
        labels = self.labels
        if isinstance(labels, str) or not isinstance(labels, (list, tuple)) or len(labels) < 2:
            raise InvalidArgument(f"config.labels must be a list of >= 2 names, got {labels!r}")
        # each label is one word of the decoded text: no spaces, each once
        if any(not isinstance(x, str) or not x or x.split() != [x] for x in labels) or len(set(labels)) != len(labels):
            raise InvalidArgument(f"config.labels must be distinct single words, got {labels!r}")
        object.__setattr__(self, "labels", tuple(labels))

    @classmethod
    def read(cls, directory: Path) -> "TaggerConfig":
        path = directory / "config.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"checkpoint {path}: not readable JSON: {e}") from None
        if not isinstance(data, dict):
            raise InvalidArgument(f"checkpoint {path}: config.json is not a JSON object")
        unknown = sorted(set(data) - {"embed_dim", "hidden_dim", "labels"})
        if unknown:
            raise InvalidArgument(f"checkpoint {path}: config.{unknown[0]} is not a TaggerConfig field")
        try:
            return cls(**data)
        except (TypeError, InvalidArgument) as e:  # a field missing, or out of range
            raise InvalidArgument(f"checkpoint {path}: {e}") from None

    def write(self, directory: Path) -> None:
        data = {**asdict(self), "labels": list(self.labels)}
        (directory / "config.json").write_text(json.dumps(data, indent=2) + "\n")


class ByteTagger(torch.nn.Module):
    def __init__(self, config: TaggerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = torch.nn.Embedding(NUM_BYTES, config.embed_dim)
        self.hidden = torch.nn.Linear(config.embed_dim, config.hidden_dim)
        self.out = torch.nn.Linear(config.hidden_dim, len(config.labels))

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        """data: uint8 [n] bytes -> logits float [n, L]."""
        x = self.embed(data.long())                                    # [n, E]
        return self.out(torch.nn.functional.gelu(self.hidden(x)))      # [n, H] -> [n, L]

    @torch.inference_mode()
    def tag(self, data: torch.Tensor) -> torch.Tensor:
        """data: uint8 [n] -> label ids int64 [n]."""
        return self.forward(data).argmax(dim=-1)


def load_tagger(checkpoint: str | Path, device: str = "cpu") -> ByteTagger:
    """The tagger of a checkpoint directory (module docstring), on `device`; InvalidArgument
    naming the file and the bad tensor or field otherwise."""
    directory = Path(checkpoint)
    model = ByteTagger(TaggerConfig.read(directory))
    path = directory / "model.safetensors"
    try:
        state = load_file(str(path))
    except (OSError, SafetensorError) as e:
        raise InvalidArgument(f"checkpoint {path}: not a readable safetensors file: {e}") from None
    want = model.state_dict()
    missing, unexpected = sorted(want.keys() - state.keys()), sorted(state.keys() - want.keys())
    if missing or unexpected:
        raise InvalidArgument(f"checkpoint {path}: missing tensors {missing}, unexpected {unexpected}")
    for name, tensor in sorted(state.items()):
        if tensor.shape != want[name].shape:
            raise InvalidArgument(f"checkpoint {path}: {name} has shape {list(tensor.shape)}, "
                                  f"config.json says {list(want[name].shape)}")
    model.load_state_dict(state)
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise InvalidArgument(f"device {device!r}: CUDA is not available here")
    return model.to(target).eval()
