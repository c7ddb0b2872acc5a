"""The byte tagger as a stateless component (engine.models.toy_tagger).

    tag   prompt (UTF-8 bytes, uint8 [n]) -> tags (label ids, int64 [min(n, params.max_len)])

Every open run is one work item; the runs of one engine step are tagged in one forward
over their bytes concatenated ([sum n]: a byte's logits depend on that byte alone, so
batching changes nothing but float rounding), then split back per request.
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

from core.errors import InvalidArgument
from engine.models.toy_tagger.model import ByteTagger, load_tagger
from engine.models.toy_tagger.params import MAX_LEN, TaggerParams
from engine.stateless_engine import StatelessConfig
from runtime.items import OpenNode
from runtime.stateless_component import StatelessComponent


class TaggerComponent(StatelessComponent):
    name = "tagger"
    nodes = ("tag",)

    def __init__(self, model: ByteTagger, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model
        self.device = next(model.parameters()).device

    @classmethod
    def from_checkpoint(cls, checkpoint: str, device: str = "cpu", max_batch_size: int = 32) -> "TaggerComponent":
        # a batch's weight is its bytes: one forward reads at most MAX_LEN of them
        return cls(load_tagger(checkpoint, device),
                   StatelessConfig(max_batch_size=max_batch_size, max_batch_weight=MAX_LEN))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = TaggerParams.from_params(item.params)
        if "prompt" not in inputs:
            raise InvalidArgument(f"open.inputs: node {item.node} needs 'prompt' (UTF-8 bytes as uint8 [n])")
        prompt = inputs["prompt"]
        if not isinstance(prompt, torch.Tensor) or prompt.dtype != torch.uint8 or prompt.dim() != 1:
            raise InvalidArgument(f"open.inputs[prompt]: expected uint8 [n] UTF-8 bytes, got "
                                  f"{getattr(prompt, 'dtype', type(prompt).__name__)} "
                                  f"{list(getattr(prompt, 'shape', ()))}")
        if prompt.numel() == 0:
            raise InvalidArgument("open.inputs[prompt]: empty (nothing to tag)")
        return "tag", prompt[:params.max_len].clone()  # [min(n, max_len)], owned (the input may be a view)

    def weight(self, key: Hashable, payload: torch.Tensor) -> int:
        return int(payload.numel())

    def run(self, key: Hashable, payloads: list[torch.Tensor]) -> list[dict[str, Any]]:
        lengths = [int(p.numel()) for p in payloads]
        tags = self.model.tag(torch.cat(payloads).to(self.device)).cpu()   # [sum n] int64
        return [{"tags": t.clone()} for t in tags.split(lengths)]          # [n_i] each
