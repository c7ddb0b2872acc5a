"""Qwen3-Omni's audio and vision towers as stateless, batched components, each servable
alone and shareable by every model whose checkpoint holds the same tower.

Node `audio_encoder`: {"audio": uint8 [n] (a WAV file's bytes)} -> {"embeds": float32
[tokens, hidden]}. Node `vision_encoder`: {"image": uint8 [n] (PNG/JPEG bytes)} ->
{"embeds": float32 [tokens, hidden], "deepstack": float32 [layers, tokens, hidden],
"grid": int64 [3] (t, h, w in patches)}. Node `video_encoder` (the same tower): {"video":
uint8 [n] (an animated GIF's bytes)} -> the same three plus "seconds": float32 [1] (seconds
per temporal patch: the video's rope time step). open() decodes the medium and extracts its
features with the checkpoint's own processor configuration, so bad media fails there as
INVALID_ARGUMENT naming the field; each step runs every queued clip (or image) of every
request in one forward: the towers keep each one's rows its solo rows (images and videos
batch together: attention stays inside one frame of one item).
"""
from __future__ import annotations

from typing import Any

import torch

from core.errors import InvalidArgument
from engine.stateless_engine import StatelessConfig
from runtime.items import OpenNode
from runtime.stateless_component import StatelessComponent

AUDIO_NODE, VISION_NODE, VIDEO_NODE = "audio_encoder", "vision_encoder", "video_encoder"


def _media_bytes(inputs: dict[str, Any], port: str, node: str) -> bytes:
    data = inputs.get(port)
    if data is None:
        raise InvalidArgument(f"open.inputs: {node} needs {port!r} (got {sorted(inputs)})")
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise InvalidArgument(f"open.inputs[{port}]: expected uint8 [n] (the encoded file), got "
                              f"{data.dtype} {tuple(data.shape)}")
    return data.numpy().tobytes()


class AudioEncoderComponent(StatelessComponent):
    name = "audio_encoder"
    nodes = (AUDIO_NODE,)

    def __init__(self, model, features, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model, self.features = model, features

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu", max_batch_size: int = 8,
                        max_queued: int = 1024) -> "AudioEncoderComponent":
        from engine.models.qwen3_omni.encoder_loader import load_audio_encoder
        from engine.models.qwen3_omni.media_features import MediaFeatures

        return cls(load_audio_encoder(checkpoint, dtype, device), MediaFeatures.from_checkpoint(checkpoint),
                   StatelessConfig(max_batch_size=max_batch_size, max_queued=max_queued))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[str, torch.Tensor]:
        data = _media_bytes(inputs, "audio", AUDIO_NODE)
        return "audio", self.features.audio(data, "open.inputs[audio]")  # [mel, frames]

    def run(self, key: str, payloads: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        rows = self.model(payloads)
        return [{"embeds": r.to(device="cpu", dtype=torch.float32, copy=True)} for r in rows]


class VisionEncoderComponent(StatelessComponent):
    name = "vision_encoder"
    nodes = (VISION_NODE, VIDEO_NODE)

    def __init__(self, model, features, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model, self.features = model, features

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu", max_batch_size: int = 8,
                        max_queued: int = 1024) -> "VisionEncoderComponent":
        from engine.models.qwen3_omni.encoder_loader import load_vision_encoder
        from engine.models.qwen3_omni.media_features import MediaFeatures

        return cls(load_vision_encoder(checkpoint, dtype, device), MediaFeatures.from_checkpoint(checkpoint),
                   StatelessConfig(max_batch_size=max_batch_size, max_queued=max_queued))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[str, tuple]:
        """-> ("vision", (pixels [N, patch_dim], grid, seconds per temporal patch or None))."""
        if item.node == VIDEO_NODE:
            data = _media_bytes(inputs, "video", VIDEO_NODE)
            return "vision", self.features.video(data, "open.inputs[video]")
        data = _media_bytes(inputs, "image", VISION_NODE)
        return "vision", (*self.features.image(data, "open.inputs[image]"), None)

    def run(self, key: str, payloads: list[tuple]) -> list[dict[str, torch.Tensor]]:
        grids = [grid for _, grid, _ in payloads]
        out = self.model(torch.cat([pixels for pixels, _, _ in payloads]), grids)
        results = []
        for embeds, deepstack, (_, grid, seconds) in zip(out.embeds, out.deepstack, payloads):
            stacked = torch.stack(deepstack) if deepstack else embeds.new_zeros((0, *embeds.shape))
            result = {"embeds": embeds.to(device="cpu", dtype=torch.float32, copy=True),
                      "deepstack": stacked.to(device="cpu", dtype=torch.float32, copy=True),
                      "grid": torch.tensor(grid, dtype=torch.int64)}
            if seconds is not None:
                result["seconds"] = torch.tensor([seconds], dtype=torch.float32)
            results.append(result)
        return results


def encoders_from_checkpoint(checkpoint: str, towers: str = "audio,vision", dtype: str = "float32",
                             device: str = "cpu", max_batch_size: int = 8, max_queued: int = 1024):
    """`starmesh serve encoder --checkpoint DIR`: both towers in one process (nodes
    audio_encoder and vision_encoder), or one of them (`towers="audio"` / `"vision"`)."""
    names = [t.strip() for t in towers.split(",") if t.strip()]
    kinds = {"audio": AudioEncoderComponent, "vision": VisionEncoderComponent}
    bad = [t for t in names if t not in kinds]
    if bad or not names:
        raise InvalidArgument(f"towers {towers!r}: name audio and/or vision")
    parts = [kinds[t].from_checkpoint(checkpoint, dtype, device, max_batch_size, max_queued) for t in names]
    if len(parts) == 1:
        return parts[0]
    from runtime.colocated import Colocated

    return Colocated(parts, name="encoder")
