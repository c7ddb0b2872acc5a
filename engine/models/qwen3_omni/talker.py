"""The Qwen3-Omni talker for the paged engine: a Qwen3-MoE decoder (shared expert) fed
embeddings, its codec head, the projections of thinker states into its width, and the
code predictor that completes each frame.

HF layout under `talker.`: model.codec_embedding (the decoder's input table, also used
to embed code group 0), model.layers.*, model.norm, codec_head, text_projection,
hidden_projection (fc1 -> act -> fc2 MLPs), code_predictor.*. Parameters here are named
like CausalLM's (model.embed_tokens, lm_head) and mapped in weight_sources.
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.base import CausalLM, WeightSource
from engine.models.qwen3_omni.code_predictor import CodePredictor
from engine.models.qwen3_omni.talker_config import TalkerSpec

RENAMES = {"model.embed_tokens.weight": "model.codec_embedding.weight", "lm_head.weight": "codec_head.weight"}


class ResizeMLP(nn.Module):
    """Thinker width -> talker width: fc2(silu(fc1(x))), both with bias."""

    def __init__(self, in_size: int, mid_size: int, out_size: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(in_size, mid_size, bias=True)
        self.linear_fc2 = nn.Linear(mid_size, out_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, thinker_hidden] -> [T, hidden]
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class Talker(CausalLM):
    def __init__(self, spec: TalkerSpec):
        super().__init__(spec.decoder)
        self.spec = spec
        hidden, mid = spec.decoder.hidden_size, spec.decoder.intermediate_size
        self.text_projection = ResizeMLP(spec.thinker_hidden_size, mid, hidden)
        self.hidden_projection = ResizeMLP(spec.thinker_hidden_size, mid, hidden)
        self.code_predictor = CodePredictor(spec.predictor, spec.num_code_groups)
        # The thinker's input embeddings of tts_bos, tts_eos, tts_pad [3, thinker_hidden]:
        # not talker weights; the loader copies these rows from the thinker's table.
        self.register_buffer("tts_embeds", torch.zeros(3, spec.thinker_hidden_size), persistent=False)
        self._tts_rows: torch.Tensor | None = None

    def codec_embed(self, codes: torch.Tensor) -> torch.Tensor:  # group-0 codes [N] -> [N, hidden]
        return self.model.embed_tokens(codes)

    def tts_rows(self) -> torch.Tensor:
        """[3, hidden]: text_projection of tts_bos, tts_eos, tts_pad (computed once)."""
        if self._tts_rows is None:
            with torch.no_grad():
                self._tts_rows = self.text_projection(self.tts_embeds)
        return self._tts_rows

    def weight_sources(self, has_tensor) -> Iterator[WeightSource]:
        for name, ckpt, index in super().weight_sources(has_tensor):
            if name.startswith("code_predictor."):
                ckpt = self.spec.predictor.weight_prefix + name[len("code_predictor."):]
            elif name in RENAMES:
                ckpt = self.config.weight_prefix + RENAMES[name]
            yield name, ckpt, index
