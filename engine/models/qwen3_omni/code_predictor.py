"""The talker's code predictor: a small dense Qwen3 decoder that, given the talker's
last hidden state and the frame's group-0 code, produces code groups 1..G-1 one at a
time (HF Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration.generate).

Its context is one frame: 2 + (G - 2) positions, the same for every request, so all
frames of a step run as one dense batch over a private paged KV cache (one block per
row) through the same attention backend as the decoder.

Per frame, HF's inputs are [talker hidden, codec_embedding(code0)] (prefill, head 0),
then code k embedded by codec_embedding[k-1] (head k), for k = 1..G-2.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.model_config import ModelConfig
from engine.models.base import DecoderLayer
from engine.models.layers import RMSNorm
from engine.models.rope import RotaryEmbedding

# picks codes from logits: (logits [B, V] fp32, group index k) -> codes [B]
PickFn = Callable[[torch.Tensor, int], torch.Tensor]


class PredictorModel(nn.Module):
    def __init__(self, config: ModelConfig, num_code_groups: int):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(config.vocab_size, config.hidden_size) for _ in range(num_code_groups - 1))


class CodePredictor(nn.Module):
    def __init__(self, config: ModelConfig, num_code_groups: int):
        super().__init__()
        self.config = config
        self.num_code_groups = num_code_groups
        self.model = PredictorModel(config, num_code_groups)
        self.lm_head = nn.ModuleList(
            nn.Linear(config.hidden_size, config.vocab_size, bias=False) for _ in range(num_code_groups - 1))
        self.rotary = RotaryEmbedding(config)
        # its caches start zeroed; its frames run one step at a time
        self.backend = TorchAttentionBackend(zero_padding=False, reuse_buffers=True)

    @property
    def frame_len(self) -> int:
        """Positions one frame feeds: talker hidden + code 0 + codes 1..G-2."""
        return self.num_code_groups

    @torch.no_grad()
    def predict(self, talker_hidden: torch.Tensor, code0_embed: torch.Tensor,
                pick: PickFn) -> tuple[torch.Tensor, torch.Tensor]:
        """talker_hidden, code0_embed [B, hidden] -> (codes [B, G-1], their input embedding sum [B, hidden]).

        The sum is what HF adds to the talker's next input: the embeddings of codes
        1..G-1 by codec_embedding[k-1] (code 0's own embedding is the caller's).
        """
        batch = talker_hidden.shape[0]
        caches = self._caches(batch, talker_hidden.dtype)
        x = torch.stack([talker_hidden, code0_embed], dim=1).reshape(2 * batch, -1)  # [B*2, hidden]
        codes, embeds = [], []
        for k in range(self.num_code_groups - 1):
            query_len, done = (2, 0) if k == 0 else (1, k + 1)
            hidden = self._forward(x, batch, query_len, done, caches)  # [B, hidden] last row of each frame
            logits = torch.nn.functional.linear(hidden, self.lm_head[k].weight).float()
            code = pick(logits, k + 1)  # [B]
            codes.append(code)
            x = self.model.codec_embedding[k](code)  # [B, hidden]: next input, and a term of the sum
            embeds.append(x)
        return torch.stack(codes, dim=1), torch.stack(embeds).sum(0)

    def _caches(self, batch: int, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        c = self.config
        shape = (batch, self.frame_len, c.num_kv_heads, c.head_dim)  # one block of frame_len per row
        return [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(c.num_layers)]

    def _forward(self, x: torch.Tensor, batch: int, query_len: int, num_cached: int, caches) -> torch.Tensor:
        """x [B * query_len, hidden] at positions num_cached.. of each row -> last rows [B, hidden]."""
        seq_len = num_cached + query_len
        positions = torch.arange(num_cached, seq_len).repeat(batch)  # [B * q]
        rows = torch.arange(batch)
        meta = AttentionMetadata(
            query_start_loc=torch.arange(batch + 1, dtype=torch.int32) * query_len,
            seq_lens=torch.full((batch,), seq_len, dtype=torch.int32),
            block_tables=rows[:, None].to(torch.int32),
            slot_mapping=(rows[:, None] * self.frame_len + torch.arange(num_cached, seq_len)).reshape(-1),
            block_size=self.frame_len)
        plan = self.backend.prepare(meta)
        cos_sin = self.rotary.rotation(positions, x.dtype)
        for layer, cache in zip(self.model.layers, caches):
            x = layer(x, cos_sin, self.backend, plan, cache)
        return self.model.norm(x)[meta.last_token_rows]
