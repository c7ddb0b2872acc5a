"""Qwen3-Omni's specifics in the shared LLM component (services/thinker/hooks.py).

- engine_options: the text model served is the checkpoint's thinker part; with a talker,
  the thinker returns every token's input embedding and the talker's accept layer's
  hidden states (the talker reads both).
- media_prompt: node prefill_media's inputs are the prompt ids and the encoder's outputs
  (services/encoder/media_list.py: every part's rows in prompt order); each placeholder
  run is widened to its part's rows, the rows are spliced there, deepstack rows added at
  the first decoder layers, and the rope ids are the multimodal ones
  (engine/models/qwen3_omni/media_splice.py). Its extra outputs are what the talker's own
  prompt and rope need: prompt_ids [P'] (the widened ids), image_grids [k, 3] and
  video_grids [k, 3] int64 (t, h, w), video_seconds [k] float32 (seconds per temporal patch).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni import THINKER_PART
from services.thinker.hooks import MediaPrompt, ThinkerHook


def read_config(checkpoint: str) -> dict | None:
    """The checkpoint's config.json (None when unreadable: the loader reports a bad checkpoint)."""
    try:
        cfg = json.loads((Path(checkpoint) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def talker_feed_options(cfg: dict) -> dict:
    """With a talker: what it consumes of every thinker token (its input embedding and the
    accept layer's hidden states)."""
    talker = cfg.get("talker_config") if cfg.get("enable_audio_output", True) else None
    if not isinstance(talker, dict):
        return {}
    return {"return_embeddings": True, "capture_layer": int(talker.get("accept_hidden_layer", 0))}


def talker_grids(media) -> dict[str, torch.Tensor]:
    """What the talker's rope needs of a PromptMedia: image_grids [k, 3], video_grids [k, 3]
    int64 and video_seconds [k] float32."""
    return {"image_grids": torch.tensor(media.image_grids, dtype=torch.int64).reshape(-1, 3),
            "video_grids": torch.tensor(media.video_grids, dtype=torch.int64).reshape(-1, 3),
            "video_seconds": torch.tensor(media.video_seconds, dtype=torch.float32).reshape(-1)}


class OmniMediaPrompt:
    """The media prompt of a checkpoint with audio and vision towers (its MediaTokens)."""

    def __init__(self, tokens) -> None:
        self.tokens = tokens

    def __call__(self, ids: list[int], inputs: Mapping[str, torch.Tensor]) -> MediaPrompt:
        from engine.models.qwen3_omni.media_prompt import ImageRows
        from engine.models.qwen3_omni.media_splice import splice_parts
        from services.encoder.media_list import unpack_encoded

        parts = []
        for i, (kind, part) in enumerate(unpack_encoded(inputs)):
            if kind == "audio":
                parts.append((kind, part.rows))
                continue
            if kind == "video" and not part.seconds > 0:
                raise InvalidArgument(f"open.inputs[seconds][{i}] must be > 0 for a video (seconds per temporal "
                                      "patch)")
            parts.append((kind, ImageRows(part.rows, list(part.deepstack.unbind(0)), part.grid,
                                          part.seconds if kind == "video" else None)))
        widened, media = splice_parts(ids, parts, self.tokens, "open.inputs[input_ids]")
        outputs = {"prompt_ids": torch.tensor(widened, dtype=torch.int64), **talker_grids(media)}
        return MediaPrompt(widened, media, outputs)


def thinker_hook(checkpoint: str, **_: Any) -> ThinkerHook | None:
    """Qwen3-Omni's ThinkerHook; None for any other checkpoint."""
    cfg = read_config(checkpoint) or {}
    thinker = cfg.get("thinker_config")
    if not isinstance(thinker, dict):
        return None
    media = None
    if "audio_token_id" in thinker and "image_token_id" in thinker:
        from engine.models.qwen3_omni.media_prompt import media_tokens_from_hf

        media = OmniMediaPrompt(media_tokens_from_hf(cfg))
    return ThinkerHook({"text_part": THINKER_PART, **talker_feed_options(cfg)}, media)
