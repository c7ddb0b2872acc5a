"""SD3's text conditioning as stateless nodes: CLIP-L, CLIP-G and T5 (through transformers)
and the join that builds the DiT's conditioning, on a StatelessEngine.

    clip_l, clip_g   prompt (UTF-8 bytes, uint8 [n]) -> embeds [2, 77, D] (penultimate layer),
                                                        pooled [2, P] (projected)
    t5               prompt                         -> embeds [2, L, D_t5] (L = params.max_sequence_length)
    join_text        the five above -> prompt_embeds, negative_prompt_embeds [1, 77 + L, D_t5],
                                       pooled, negative_pooled [1, P_l + P_g]

Row 0 is the prompt, row 1 the negative prompt (params.negative_prompt, default "").
The join concatenates the CLIP features, zero-pads them to T5's width and puts them
before the T5 tokens, as StableDiffusion3Pipeline.encode_prompt does. Encoder runs of
several requests batch into one call when their token lengths match.
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

from engine.stateless_engine import StatelessConfig
from engine.models.sd3.checkpoint import checkpoint_dir, load_model
from services.dit.params import image_params
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode
from core.errors import InvalidArgument

ENCODERS = {"clip_l": ("text_encoder", "tokenizer"), "clip_g": ("text_encoder_2", "tokenizer_2"),
            "t5": ("text_encoder_3", "tokenizer_3")}
JOIN_INPUTS = ("clip_l_embeds", "clip_l_pooled", "clip_g_embeds", "clip_g_pooled", "t5_embeds")


def prompt_text(inputs: dict[str, Any], node: str) -> str:
    if "prompt" not in inputs:
        raise InvalidArgument(f"open.inputs: node {node} needs 'prompt' (UTF-8 bytes as uint8 [n])")
    t = inputs["prompt"]
    if t.dtype != torch.uint8 or t.dim() != 1:
        raise InvalidArgument(f"open.inputs[prompt]: expected uint8 [n] UTF-8 bytes, got {t.dtype} {list(t.shape)}")
    try:
        return bytes(t.tolist()).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"open.inputs[prompt]: not UTF-8 ({e})") from None


class TextEncoderComponent(StatelessComponent):
    name = "text_encoder"

    def __init__(self, encoders: dict[str, tuple[Any, Any]], device: str = "cpu",
                 config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.encoders = encoders  # node -> (model, tokenizer)
        self.nodes = self.nodes_of(encoders)
        self.device = torch.device(device)

    @staticmethod
    def nodes_of(encoders=ENCODERS) -> tuple[str, ...]:
        return (*encoders, "join_text")

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        encoders: list[str] | None = None, max_batch_size: int = 8) -> "TextEncoderComponent":
        import transformers as tf

        names = list(encoders or ENCODERS)
        unknown = [n for n in names if n not in ENCODERS]
        if unknown:
            raise InvalidArgument(f"encoders {unknown} are not among {list(ENCODERS)}")
        classes = {"clip_l": tf.CLIPTextModelWithProjection, "clip_g": tf.CLIPTextModelWithProjection,
                   "t5": tf.T5EncoderModel}
        loaded = {}
        for node in names:
            model_dir, tok_dir = ENCODERS[node]
            model = load_model(classes[node], checkpoint, model_dir, dtype, device)
            tokenizer = tf.AutoTokenizer.from_pretrained(str(checkpoint_dir(checkpoint) / tok_dir),
                                                         local_files_only=True)
            loaded[node] = (model, tokenizer)
        return cls(loaded, device, StatelessConfig(max_batch_size=max_batch_size))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = image_params(item.params)
        if item.node == "join_text":
            missing = [n for n in JOIN_INPUTS if n not in inputs]
            if missing:
                raise InvalidArgument(f"open.inputs: join_text needs {missing}")
            return ("join_text",), {n: inputs[n] for n in JOIN_INPUTS}
        text = prompt_text(inputs, item.node)
        _, tokenizer = self.encoders[item.node]
        max_len = params.max_sequence_length if item.node == "t5" else tokenizer.model_max_length
        return (item.node, max_len), (text, params.negative_prompt)

    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        if key[0] == "join_text":
            return [join_text(p) for p in payloads]
        return self._encode(key[0], key[1], [t for p in payloads for t in p])

    @torch.inference_mode()
    def _encode(self, node: str, max_len: int, texts: list[str]) -> list[dict[str, torch.Tensor]]:
        """texts: [prompt, negative] per request -> each request's two rows."""
        model, tokenizer = self.encoders[node]
        ids = tokenizer(texts, padding="max_length", max_length=max_len, truncation=True,
                        return_tensors="pt").input_ids.to(self.device)  # [2B, L]
        if node == "t5":
            hidden = model(ids)[0]  # [2B, L, D]
            return [{"embeds": hidden[i:i + 2].clone()} for i in range(0, len(texts), 2)]
        out = model(ids, output_hidden_states=True)
        hidden, pooled = out.hidden_states[-2], out[0]  # [2B, L, D], [2B, P]
        return [{"embeds": hidden[i:i + 2].clone(), "pooled": pooled[i:i + 2].clone()}
                for i in range(0, len(texts), 2)]


def join_text(parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    clip = torch.cat([parts["clip_l_embeds"], parts["clip_g_embeds"]], dim=-1)  # [2, 77, D_l + D_g]
    t5 = parts["t5_embeds"]                                                    # [2, L, D_t5]
    if clip.shape[-1] > t5.shape[-1]:
        raise InvalidArgument(f"open.inputs: CLIP features ({clip.shape[-1]}) are wider than T5's ({t5.shape[-1]})")
    clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
    embeds = torch.cat([clip, t5.to(clip.dtype)], dim=-2)                    # [2, 77 + L, D_t5]
    pooled = torch.cat([parts["clip_l_pooled"], parts["clip_g_pooled"]], dim=-1)  # [2, P_l + P_g]
    return {"prompt_embeds": embeds[0:1].clone(), "negative_prompt_embeds": embeds[1:2].clone(),
            "pooled": pooled[0:1].clone(), "negative_pooled": pooled[1:2].clone()}
