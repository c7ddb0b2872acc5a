"""V-JEPA 2-AC checkpoints: a directory with `config.json` (`{"model_type": "vjepa2_ac"}`,
what deployment tools look for in a checkpoint, plus the loop's `frame_encoding` and
`normalize_reps` (engine.models.vjepa2_ac.loop; absent: the upstream loop)), `encoder/`
(a transformers VJEPA2Model saved with save_pretrained: config.json + model.safetensors,
tensors `encoder.*`; its masked-prediction `predictor.*` is not used) and `predictor/`
(config.json holding PredictorConfig's fields + model.safetensors in the upstream key
layout).

The upstream key layout is the state dict of the reference VisionTransformerPredictorAC
(`predictor_embed.*`, `predictor_blocks.{i}.attn.qkv.*`, ...); released training
checkpoints store it under a `predictor` entry with a `module.` prefix (data-parallel
wrapping), which `upstream_predictor_state` strips. Weights are read with safetensors,
never with pickle.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.config import EncoderConfig, PredictorConfig
from engine.models.vjepa2_ac.encoder import VJEPA2Encoder
from engine.models.vjepa2_ac.loop import LoopConfig
from engine.models.vjepa2_ac.predictor import ACPredictor

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
UPSTREAM_PREFIXES = ("module.", "predictor.", "_orig_mod.")
WORLD_MODEL_TYPE = "vjepa2_ac"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"{path}: not readable JSON: {e}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"{path}: expected a JSON object")
    return data


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as e:
        raise InvalidArgument(f"{path}: not a readable safetensors file: {e}") from None


def _load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    want = set(module.state_dict())
    missing, unexpected = sorted(want - state.keys()), sorted(state.keys() - want)
    if missing or unexpected:
        raise InvalidArgument(f"{where}: missing tensors {missing[:5]}, unexpected {unexpected[:5]}")
    module.load_state_dict(state)


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise InvalidArgument(f"dtype {name!r} is not one of {sorted(DTYPES)}")
    return DTYPES[name]


def load_encoder(directory: str | Path, dtype: torch.dtype = torch.float32) -> VJEPA2Encoder:
    path = Path(directory)
    cfg = EncoderConfig.from_hf(_read_json(path / "config.json"))
    state = {k.removeprefix("encoder."): v for k, v in _tensors(path / "model.safetensors").items()
             if k.startswith("encoder.")}
    model = VJEPA2Encoder(cfg)
    _load_strict(model, state, f"{path}: encoder")
    return model.to(dtype).eval()


def upstream_predictor_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An upstream predictor state dict (optionally `module.`/`predictor.`-prefixed) in
    the names ACPredictor uses (the same names, prefixes stripped)."""
    out = {}
    for key, value in state.items():
        for prefix in UPSTREAM_PREFIXES:
            key = key.removeprefix(prefix)
        out[key] = value
    return out


def load_predictor_state(model: ACPredictor, state: dict[str, torch.Tensor], where: str = "predictor") -> None:
    _load_strict(model, upstream_predictor_state(state), where)


def load_predictor(directory: str | Path, dtype: torch.dtype = torch.float32) -> ACPredictor:
    path = Path(directory)
    model = ACPredictor(PredictorConfig.from_dict(_read_json(path / "config.json")))
    load_predictor_state(model, _tensors(path / "model.safetensors"), f"{path}: predictor")
    return model.to(dtype).eval()


def save_predictor(model: ACPredictor, directory: str | Path) -> Path:
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    (path / "config.json").write_text(json.dumps({"model_type": "vjepa2_ac_predictor", **cfg.__dict__}, indent=2))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path


def write_manifest(directory: str | Path, loop: LoopConfig = LoopConfig()) -> Path:
    """The top-level config.json of a checkpoint directory."""
    path = Path(directory) / "config.json"
    path.write_text(json.dumps({"model_type": WORLD_MODEL_TYPE, "encoder": "encoder", "predictor": "predictor",
                                "frame_encoding": loop.frame_encoding, "normalize_reps": loop.normalize_reps}))
    return path


def load_loop(directory: str | Path) -> LoopConfig:
    """The loop a checkpoint names in its config.json (the upstream loop where it names
    none, or has no config.json)."""
    path = Path(directory) / "config.json"
    return LoopConfig.from_dict(_read_json(path)) if path.is_file() else LoopConfig()


def load_world(directory: str | Path, dtype: str = "float32") -> tuple[VJEPA2Encoder, ACPredictor]:
    """The encoder and the predictor of a checkpoint directory, checked to fit together."""
    path = Path(directory)
    if not (path / "encoder").is_dir() or not (path / "predictor").is_dir():
        raise InvalidArgument(f"checkpoint {str(path)!r} needs encoder/ and predictor/ folders")
    encoder, predictor = load_encoder(path / "encoder", torch_dtype(dtype)), load_predictor(path / "predictor",
                                                                                             torch_dtype(dtype))
    enc, pred = encoder.config, predictor.config
    if pred.embed_dim != enc.hidden_size or (pred.grid_height, pred.grid_width) != (enc.grid_size, enc.grid_size):
        raise InvalidArgument(f"checkpoint {str(path)!r}: the predictor (embed_dim {pred.embed_dim}, grid "
                              f"{pred.grid_height}x{pred.grid_width}) does not fit the encoder (hidden_size "
                              f"{enc.hidden_size}, grid {enc.grid_size}x{enc.grid_size})")
    return encoder, predictor
