"""Load the talker of a Qwen3-Omni checkpoint (tensors under `talker.`) for the paged engine."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch

from engine.models.loader import _checkpoint_dir, _load_weights, _read_json, _Tensors, weight_files
from engine.models.qwen3_omni.talker import Talker
from engine.offload.config import OffloadConfig
from engine.offload.loading import attach_offload, effective_config, prepare_host_weights, skipped_names
from engine.models.qwen3_omni.talker_config import TalkerSpec, talker_spec_from_hf
from engine.models.meta_device import meta_device


def read_talker_spec(checkpoint_dir: str | Path, dtype: str | None = None) -> TalkerSpec:
    path = _checkpoint_dir(checkpoint_dir)
    return talker_spec_from_hf(_read_json(path / "config.json"), dtype, where=str(path / "config.json"))


def load_talker(checkpoint_dir: str | Path, dtype: str | None = None, device: str | torch.device = "cpu",
                offload: OffloadConfig | None = None) -> Talker:
    """The talker with its code predictor and projections, weights read by name.
    offload: as engine.models.loader.load_model (the decoder layers stream)."""
    path = _checkpoint_dir(checkpoint_dir)
    spec = read_talker_spec(path, dtype)
    offload = effective_config(offload, "kv_cache")
    with meta_device():
        model = Talker(spec)
    model = model.to(dtype=spec.decoder.torch_dtype).to_empty(device="cpu" if offload else device)
    model = model.requires_grad_(False).eval()
    files = weight_files(path)
    with ExitStack() as stack:
        tensors = _Tensors(path, files, stack)
        mapped = prepare_host_weights(model, offload, files, model.weight_sources(tensors.has))
        _load_weights(model, tensors, skipped_names(mapped))
        table = tensors.get("thinker.model.embed_tokens.weight")  # [thinker_vocab, thinker_hidden]
        ids = [spec.tokens[f] for f in ("tts_bos_token_id", "tts_eos_token_id", "tts_pad_token_id")]
        model.tts_embeds.copy_(table[ids])
    model.checkpoint_dir = path
    model.offload_backend = attach_offload(model, offload, mapped, device)
    return model
