"""Load a Hugging Face checkpoint directory into one of the engine's models.

Layout: `config.json` plus `model.safetensors` or a sharded `model.safetensors.index.json`.
Weights are read with safetensors (memory-mapped), never with pickle. Families by
`model_type`: qwen3, qwen3_moe, llama; a composite checkpoint serves the text model of the
part its owner names (`text_part`, e.g. Qwen3-Omni's thinker: config
`thinker_config.text_config`, tensors `thinker.model.*`, `thinker.lm_head.*`, loaded as a
Qwen3-MoE).

Qwen3-Omni text rope: the thinker's rotary embedding
(transformers Qwen3OmniMoeThinkerTextRotaryEmbedding) computes one angle table per
position axis (temporal, height, width) with the *same* inv_freq, then builds the final
table by taking axis T's angles and overwriting the H and W channels selected by
`mrope_section` (interleaved: channel offsets 1 and 2, stride 3; the layout is always
interleaved in that implementation, whatever `interleaved`/`mrope_interleaved` say).
For text-only input the three axes' position ids are equal, so all three tables are
identical and the result is exactly the ordinary 1-D rope over the full head_dim, for
any `mrope_section`. Text-only input therefore gets the 1-D rope; audio and image tokens'
3-D position ids (engine/prompt_media.py) take the multimodal rope of engine/models/rope.py.
"""
from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from engine.model_config import ModelConfig, model_config_from_hf
from engine.models import CausalLM, model_class
from engine.offload.config import OffloadConfig
from engine.offload.loading import attach_offload, effective_config, prepare_host_weights, skipped_names
from core.errors import InvalidArgument
from engine.models.meta_device import meta_device

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgument(f"{path}: not readable JSON: {e}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"{path}: expected a JSON object")
    return data


def _checkpoint_dir(checkpoint_dir: str | Path) -> Path:
    path = Path(checkpoint_dir)
    if not path.is_dir():
        raise InvalidArgument(f"checkpoint directory {str(path)!r} does not exist")
    if not (path / "config.json").is_file():
        raise InvalidArgument(f"checkpoint {str(path)!r} has no config.json")
    return path


def read_model_config(checkpoint_dir: str | Path, dtype: str | None = None, text_part: str = "") -> ModelConfig:
    """The ModelConfig of a checkpoint (eos ids merged from generation_config.json);
    text_part: the part of a composite checkpoint to serve (engine.model_config.text_config_of)."""
    path = _checkpoint_dir(checkpoint_dir)
    config = model_config_from_hf(_read_json(path / "config.json"), dtype, where=str(path / "config.json"),
                                  text_part=text_part)
    generation = path / "generation_config.json"
    if generation.is_file():
        eos = _read_json(generation).get("eos_token_id")
        eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
        merged = tuple(dict.fromkeys([*config.eos_token_ids, *(int(e) for e in eos)]))
        config = ModelConfig(**{**config.__dict__, "eos_token_ids": merged})
    return config


def tokenizer_path(checkpoint_dir: str | Path) -> Path | None:
    """The directory to load a tokenizer from, if the checkpoint ships tokenizer files."""
    path = Path(checkpoint_dir)
    return path if any((path / name).is_file() for name in TOKENIZER_FILES) else None


def weight_files(path: Path) -> dict[str, Path]:
    """tensor name -> safetensors file holding it."""
    if (path / INDEX_FILE).is_file():
        weight_map = _read_json(path / INDEX_FILE).get("weight_map")
        if not isinstance(weight_map, dict):
            raise InvalidArgument(f"{path / INDEX_FILE}: no weight_map")
        missing = sorted({f for f in weight_map.values() if not (path / f).is_file()})
        if missing:
            raise InvalidArgument(f"{path / INDEX_FILE}: shard files missing: {missing}")
        return {name: path / f for name, f in weight_map.items()}
    if (path / SINGLE_FILE).is_file():
        with _open(path / SINGLE_FILE) as f:
            return {name: path / SINGLE_FILE for name in f.keys()}
    raise InvalidArgument(f"checkpoint {str(path)!r} has neither {SINGLE_FILE} nor {INDEX_FILE}")


def _open(file: Path):
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError) as e:
        raise InvalidArgument(f"{file}: not a readable safetensors file: {e}") from None


class _Tensors:
    """Memory-mapped reads of named tensors across a checkpoint's safetensors files."""

    def __init__(self, root: Path, files: dict[str, Path], stack: ExitStack):
        self.root = root
        self.files = files
        self._stack = stack
        self._handles: dict[Path, object] = {}

    def has(self, name: str) -> bool:
        return name in self.files

    def get(self, name: str) -> torch.Tensor:
        file = self.files.get(name)
        if file is None:
            raise InvalidArgument(f"checkpoint {str(self.root)!r} is missing tensor {name!r}")
        if file not in self._handles:
            self._handles[file] = self._stack.enter_context(_open(file))
        try:
            return self._handles[file].get_tensor(name)
        except (SafetensorError, OSError) as e:
            raise InvalidArgument(f"{file}: cannot read tensor {name!r}: {e}") from None


def _load_weights(model: CausalLM, tensors: _Tensors, skip: frozenset[str] = frozenset()) -> None:
    """Copies every parameter not in `skip` (streamed ones the offload backend maps) from its sources."""
    params = dict(model.named_parameters())
    for param_name, ckpt_name, index in model.weight_sources(tensors.has):
        if param_name in skip:
            continue
        target = params[param_name].data
        target = target if index is None else target[index]
        tensor = tensors.get(ckpt_name)
        if tuple(tensor.shape) != tuple(target.shape):
            raise InvalidArgument(
                f"tensor {ckpt_name!r} in {tensors.files[ckpt_name].name} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(target.shape)}")
        target.copy_(tensor)


def build_model(config: ModelConfig, device: str | torch.device = "cpu") -> CausalLM:
    """An uninitialized model of config's family, dtype and device (no random init)."""
    with meta_device():
        model = model_class(config)(config)
    model = model.to(dtype=config.torch_dtype).to_empty(device=device)
    return model.requires_grad_(False).eval()


def load_model(checkpoint_dir: str | Path, dtype: str | None = None, device: str | torch.device = "cpu",
               offload: OffloadConfig | None = None, text_part: str = "") -> CausalLM:
    """Load a checkpoint; dtype "float32"/"bfloat16"/"float16" (default: the checkpoint's);
    text_part: the part of a composite checkpoint to serve (engine.model_config.text_config_of).

    The returned model also carries `checkpoint_dir`, `tokenizer_path` (None when the
    checkpoint has no tokenizer files) and `offload_backend` (None unless offload is on:
    `offload`, else the process's default, see engine.offload.loading).
    """
    path = _checkpoint_dir(checkpoint_dir)
    config = read_model_config(path, dtype, text_part)
    files = weight_files(path)
    offload = effective_config(offload, "kv_cache")
    model = build_model(config, "cpu" if offload else device)
    with ExitStack() as stack:
        tensors = _Tensors(path, files, stack)
        mapped = prepare_host_weights(model, offload, files, model.weight_sources(tensors.has))
        _load_weights(model, tensors, skipped_names(mapped))
    model.checkpoint_dir = path
    model.tokenizer_path = tokenizer_path(path)
    model.offload_backend = attach_offload(model, offload, mapped, device)
    return model
