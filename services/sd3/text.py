"""SD3's text conditioning as stateless nodes: CLIP-L, CLIP-G and T5 and the join that
builds the DiT's conditioning (engine.models.sd3.text_encoders), on a StatelessEngine.

    clip_l, clip_g   prompt (UTF-8 bytes, uint8 [n]) -> embeds [2, 77, D] (penultimate layer),
                                                        pooled [2, P] (projected)
    t5               prompt                         -> embeds [2, L, D_t5] (L = params.max_sequence_length)
    join_text        the five above -> prompt_embeds, negative_prompt_embeds [1, 77 + L, D_t5],
                                       pooled, negative_pooled [1, P_l + P_g]

Row 0 is the prompt, row 1 the negative prompt (params.negative_prompt, default "").
Encoder runs of several requests batch into one call when their token lengths match.
Both are bounded in bytes (MAX_PROMPT_BYTES) before anything decodes or tokenizes them:
tokenizing costs ~3 s a MiB on the engine thread every request here shares.
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

from engine.stateless_engine import StatelessConfig
from engine.models.sd3.text_encoders import ENCODERS, Sd3TextEncoders, join_conditioning
from engine.models.sd3.params import MAX_PROMPT_BYTES, ImageParams
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode
from core.errors import InvalidArgument

JOIN_INPUTS = ("clip_l_embeds", "clip_l_pooled", "clip_g_embeds", "clip_g_pooled", "t5_embeds")


def prompt_text(inputs: dict[str, Any], node: str) -> str:
    if "prompt" not in inputs:
        raise InvalidArgument(f"open.inputs: node {node} needs 'prompt' (UTF-8 bytes as uint8 [n])")
    t = inputs["prompt"]
    if t.dtype != torch.uint8 or t.dim() != 1:
        raise InvalidArgument(f"open.inputs[prompt]: expected uint8 [n] UTF-8 bytes, got {t.dtype} {list(t.shape)}")
    check_prompt_bytes("open.inputs[prompt]", t.numel())
    try:
        return t.numpy().tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"open.inputs[prompt]: not UTF-8 ({e})") from None


def check_prompt_bytes(field: str, nbytes: int) -> None:
    if nbytes > MAX_PROMPT_BYTES:
        raise InvalidArgument(f"{field} is {nbytes} bytes, over the limit of {MAX_PROMPT_BYTES} (the encoders keep "
                              "at most 77 CLIP and 512 T5 tokens of it)")


class TextEncoderComponent(StatelessComponent):
    name = "text_encoder"

    def __init__(self, model: Sd3TextEncoders, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model  # one node per encoder, named as the encoder
        self.nodes = self.nodes_of(model.names)

    @staticmethod
    def nodes_of(encoders=ENCODERS) -> tuple[str, ...]:
        return (*encoders, "join_text")

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        encoders: list[str] | None = None, max_batch_size: int = 8) -> "TextEncoderComponent":
        model = Sd3TextEncoders.load(checkpoint, dtype, device, encoders)
        return cls(model, StatelessConfig(max_batch_size=max_batch_size))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = ImageParams.from_params(item.params)
        if item.node == "join_text":
            missing = [n for n in JOIN_INPUTS if n not in inputs]
            if missing:
                raise InvalidArgument(f"open.inputs: join_text needs {missing}")
            return ("join_text",), {n: inputs[n] for n in JOIN_INPUTS}
        text = prompt_text(inputs, item.node)
        if len(params.negative_prompt) > MAX_PROMPT_BYTES // 4:  # characters: at most 4 bytes each
            check_prompt_bytes("params.negative_prompt", len(params.negative_prompt.encode()))
        max_len = self.model.token_len(item.node, params.max_sequence_length)
        return (item.node, max_len), (text, params.negative_prompt)

    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        if key[0] == "join_text":
            return [join_text(p) for p in payloads]
        return self._encode(key[0], key[1], [t for p in payloads for t in p])

    @torch.inference_mode()
    def _encode(self, node: str, max_len: int, texts: list[str]) -> list[dict[str, torch.Tensor]]:
        """texts: [prompt, negative] per request -> each request's two rows."""
        hidden, pooled = self.model.encode(node, texts, max_len)  # [2B, L, D], [2B, P] (None for t5)
        rows = range(0, len(texts), 2)
        if pooled is None:
            return [{"embeds": hidden[i:i + 2].clone()} for i in rows]
        return [{"embeds": hidden[i:i + 2].clone(), "pooled": pooled[i:i + 2].clone()} for i in rows]


def join_text(parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The join node: rows [prompt, negative] of each input -> one row per output."""
    embeds, pooled = join_conditioning((parts["clip_l_embeds"], parts["clip_l_pooled"]),
                                       (parts["clip_g_embeds"], parts["clip_g_pooled"]), parts["t5_embeds"])
    return {"prompt_embeds": embeds[0:1].clone(), "negative_prompt_embeds": embeds[1:2].clone(),
            "pooled": pooled[0:1].clone(), "negative_pooled": pooled[1:2].clone()}
