"""A user turn of interleaved parts (text, and audio/image/video files in any order) as the
mesh sees it and as transformers sees it, for the fidelity tests.

    content = [("image", png), "Compare ", ("audio", wav), ("image", png2)]
    ids = template_ids(ckpt, content)               # one placeholder per part (the conductor's ids)
    encoded = encode_parts(ckpt, content)           # the encoder service's outputs, in-process
    kwargs = reference_kwargs(features, content)    # transformers' processor inputs
"""
from __future__ import annotations

import torch

from services.encoder.media_list import MEDIA_KINDS, pack_encoded


def media_of(content: list) -> list[tuple[str, bytes]]:
    return [part for part in content if not isinstance(part, str)]


def template_ids(checkpoint, content: list) -> list[int]:
    """The user turn through the checkpoint's chat template, the assistant's turn opened."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True)
    parts = [{"type": "text", "text": p} if isinstance(p, str) else {"type": p[0]} for p in content]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": parts}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    return [int(i) for i in ids]


def towers(checkpoint) -> dict:
    """Qwen3-Omni's towers by kind, through its encoder hook (as the encoder service loads them)."""
    from services.qwen3_omni.encoder_hook import encoder_hook

    hook = encoder_hook(str(checkpoint))
    loaded = {name: load("float32", "cpu") for name, load in hook.towers.items()}
    return {kind: tower for tower in loaded.values() for kind in tower.kinds}


def encode_parts(checkpoint, content: list, by_kind: dict | None = None) -> dict[str, torch.Tensor]:
    """The media_encoder node's outputs for the content's media, each part encoded alone."""
    by_kind = by_kind or towers(checkpoint)
    media = media_of(content)
    parts = [by_kind[k].run([by_kind[k].prepare(k, data, f"part {i}")])[0] for i, (k, data) in enumerate(media)]
    return pack_encoded([k for k, _ in media], parts)


def reference_kwargs(features, content: list) -> dict:
    """transformers' generate() media inputs for the content's parts (at most one clip)."""
    media = media_of(content)
    assert all(k in MEDIA_KINDS for k, _ in media) and sum(k == "audio" for k, _ in media) <= 1
    kwargs: dict = {}
    for kind, data in media:
        if kind == "audio":
            mel = features.audio(data, "audio")
            kwargs.update(input_features=mel[None], feature_attention_mask=torch.ones(1, mel.shape[1],
                                                                                      dtype=torch.long))
    images = [features.image(d, "image") for k, d in media if k == "image"]
    if images:
        kwargs.update(pixel_values=torch.cat([p for p, _ in images]),
                      image_grid_thw=torch.tensor([g for _, g in images]))
    videos = [features.video(d, "video") for k, d in media if k == "video"]
    if videos:
        kwargs.update(pixel_values_videos=torch.cat([p for p, _, _ in videos]),
                      video_grid_thw=torch.tensor([g for _, g, _ in videos]),
                      video_second_per_grid=torch.tensor([s for _, _, s in videos]))
    return kwargs
