"""SD3's three text encoders (CLIP-L, CLIP-G and T5, through transformers) and the join
that builds the DiT's conditioning from their features.

CLIP features are the penultimate hidden layer plus the projected pooled output; T5's
are its last hidden layer. The join concatenates the CLIP features, zero-pads them to
T5's width and puts them before the T5 tokens, as StableDiffusion3Pipeline.encode_prompt
does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from core.errors import InvalidArgument
from engine.models.sd3.checkpoint import checkpoint_dir, load_model

# encoder -> (model folder, tokenizer folder) in the diffusers layout
ENCODERS = {"clip_l": ("text_encoder", "tokenizer"), "clip_g": ("text_encoder_2", "tokenizer_2"),
            "t5": ("text_encoder_3", "tokenizer_3")}


class Sd3TextEncoders:
    def __init__(self, encoders: dict[str, tuple[Any, Any]], device: str = "cpu") -> None:
        self.encoders = encoders  # name -> (model, tokenizer)
        self.device = torch.device(device)

    @classmethod
    def load(cls, checkpoint: str | Path, dtype: str = "float32", device: str = "cpu",
             names: list[str] | None = None) -> "Sd3TextEncoders":
        """The encoders `names` (default: all three) of a checkpoint, local files only."""
        import transformers as tf

        names = list(names or ENCODERS)
        unknown = [n for n in names if n not in ENCODERS]
        if unknown:
            raise InvalidArgument(f"encoders {unknown} are not among {list(ENCODERS)}")
        classes = {"clip_l": tf.CLIPTextModelWithProjection, "clip_g": tf.CLIPTextModelWithProjection,
                   "t5": tf.T5EncoderModel}
        loaded = {}
        for name in names:
            model_dir, tok_dir = ENCODERS[name]
            model = load_model(classes[name], checkpoint, model_dir, dtype, device)
            tokenizer = tf.AutoTokenizer.from_pretrained(str(checkpoint_dir(checkpoint) / tok_dir),
                                                         local_files_only=True)
            loaded[name] = (model, tokenizer)
        return cls(loaded, device)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.encoders)

    def token_len(self, name: str, t5_len: int) -> int:
        """Tokens each text is padded or truncated to: CLIP's fixed context, T5's `t5_len`."""
        return t5_len if name == "t5" else self.encoders[name][1].model_max_length

    @torch.inference_mode()
    def encode(self, name: str, texts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """texts [N] -> (embeds [N, max_len, D], pooled [N, P], None for T5), one call."""
        model, tokenizer = self.encoders[name]
        ids = tokenizer(texts, padding="max_length", max_length=max_len, truncation=True,
                        return_tensors="pt").input_ids.to(self.device)  # [N, L]
        if name == "t5":
            return model(ids)[0], None  # [N, L, D]
        out = model(ids, output_hidden_states=True)
        return out.hidden_states[-2], out[0]  # [N, L, D], [N, P]


def join_conditioning(clip_l: tuple[torch.Tensor, torch.Tensor], clip_g: tuple[torch.Tensor, torch.Tensor],
                      t5_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(embeds, pooled) of each CLIP encoder [N, 77, D_l|D_g], [N, P_l|P_g] and T5's
    embeds [N, L, D_t5] -> the DiT's embeds [N, 77 + L, D_t5] and pooled [N, P_l + P_g]."""
    clip = torch.cat([clip_l[0], clip_g[0]], dim=-1)  # [N, 77, D_l + D_g]
    if clip.shape[-1] > t5_embeds.shape[-1]:
        raise InvalidArgument(f"open.inputs: CLIP features ({clip.shape[-1]}) are wider than T5's "
                              f"({t5_embeds.shape[-1]})")
    clip = torch.nn.functional.pad(clip, (0, t5_embeds.shape[-1] - clip.shape[-1]))
    embeds = torch.cat([clip, t5_embeds.to(clip.dtype)], dim=-2)  # [N, 77 + L, D_t5]
    pooled = torch.cat([clip_l[1], clip_g[1]], dim=-1)            # [N, P_l + P_g]
    return embeds, pooled
