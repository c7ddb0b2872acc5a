"""A prompt's media parts, in prompt order, spliced into its placeholder runs: the widened
ids and the thinker's PromptMedia (engine/models/qwen3_omni/media_prompt.py).

The chat template renders each part as one placeholder (<|audio_pad|>, <|image_pad|> or
<|video_pad|>, between its start and end ids); the k-th placeholder run of the prompt,
whatever its kind, holds the k-th part, which must be of that kind. Each run is widened
to its part's rows (a run already as long passes unchanged), so parts may come in any
order and any number: image, text, audio, image; an image and a video; two clips.

    ids, media = splice_parts(prompt_ids, [("image", ImageRows(...)), ("audio", rows [n, hidden])], tokens)
"""
from __future__ import annotations

import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.media_prompt import ImageRows, MediaTokens, build_prompt_media
from engine.prompt_media import PromptMedia

Part = tuple[str, "torch.Tensor | ImageRows"]  # ("audio", rows [n, hidden]) or ("image" | "video", ImageRows)


def placeholder_ids(tokens: MediaTokens) -> dict[int, str]:
    """placeholder id -> the kind of part it stands for."""
    kinds = {tokens.audio_token_id: "audio", tokens.image_token_id: "image"}
    if tokens.video_token_id >= 0:
        kinds[tokens.video_token_id] = "video"
    return kinds


def _num_rows(value) -> int:
    return int(value.shape[0]) if isinstance(value, torch.Tensor) else len(value.embeds)


def widen(ids: list[int], parts: list[Part], tokens: MediaTokens, field: str = "input_ids") -> list[int]:
    """`ids` with the k-th placeholder run made as long as parts[k]'s rows; InvalidArgument
    naming `field` when runs and parts disagree in number or kind."""
    kinds = placeholder_ids(tokens)
    out, k, i = [], 0, 0
    while i < len(ids):
        kind = kinds.get(ids[i])
        if kind is None:
            out.append(ids[i])
            i += 1
            continue
        j = i
        while j < len(ids) and ids[j] == ids[i]:
            j += 1
        if k >= len(parts):
            raise InvalidArgument(f"{field}: more media placeholders than media parts ({len(parts)})")
        if parts[k][0] != kind:
            raise InvalidArgument(f"{field}: media placeholder {k} stands for {kind}, but media part {k} is "
                                  f"{parts[k][0]}")
        out += [ids[i]] * _num_rows(parts[k][1])
        k, i = k + 1, j
    if k != len(parts):
        raise InvalidArgument(f"{field}: {k} media placeholders for {len(parts)} media parts")
    return out


def splice_parts(ids: list[int], parts: list[Part], tokens: MediaTokens,
                 field: str = "input_ids") -> tuple[list[int], PromptMedia]:
    """(widened ids, PromptMedia) of a prompt whose placeholder runs hold `parts` in order."""
    if not parts:
        raise InvalidArgument(f"{field}: a media prompt needs at least one media part")
    for k, (kind, value) in enumerate(parts):
        if kind not in ("audio", "image", "video"):
            raise InvalidArgument(f"media part {k}: unknown kind {kind!r}")
        if (kind == "audio") != isinstance(value, torch.Tensor):
            raise InvalidArgument(f"media part {k} ({kind}): audio is rows [n, hidden], images and videos ImageRows")
        if kind == "video" and tokens.video_token_id < 0:
            raise InvalidArgument(f"media part {k}: this checkpoint has no video_token_id (no video input)")
    widened = widen(ids, parts, tokens, field)
    by_kind = {kind: [v for k, v in parts if k == kind] for kind in ("audio", "image", "video")}
    return widened, build_prompt_media(widened, tokens, by_kind["audio"], by_kind["image"], by_kind["video"])
