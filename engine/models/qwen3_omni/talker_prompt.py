"""The talker's prompt rows, built from the thinker's rows as HF's Qwen3-Omni generate does
(`_get_talker_user_parts`, `_get_talker_assistant_parts`), for one request.

  user rows       every prompt position whose turn is `user`: text_projection(embedding),
                  or hidden_projection(accept-layer hidden) at audio/image/video tokens;
  assistant head  9 rows: text part [a, a+1, a+2 projected; tts_pad x4; tts_bos; a+3 projected]
                  plus codec part [0 x3; codec_embed(nothink, think_bos, think_eos, speaker,
                  codec_pad, codec_bos)].
  rope ids        1-D, unless the user rows hold images or videos: then HF's get_rope_index over the
                  talker's ids (the user ids, then tts_pad for the head), with the talker's
                  own merge size and time scale.
"""
from __future__ import annotations

import torch

from engine.models.qwen3_omni.media_prompt import ImageRows, vision_rope
from engine.models.qwen3_omni.talker import Talker
from engine.prompt_media import PromptMedia
from engine.models.qwen3_omni.talker_request import HEAD_ROWS, TalkerRequest

CODEC_HEAD = ("codec_nothink_id", "codec_think_bos_id", "codec_think_eos_id", None, "codec_pad_id", "codec_bos_id")


def user_positions(ids: list[int], tokens: dict) -> list[int]:
    """Prompt positions in a user turn: the token after their last <|im_start|> is `user`."""
    last_start, out = 0, []
    for p, t in enumerate(ids):
        if t == tokens["im_start_token_id"]:
            last_start = p
        role = ids[min(last_start + 1, len(ids) - 1)]
        if role == tokens["user_token_id"]:
            out.append(p)
    return out


@torch.no_grad()
def talker_prompt(model: Talker, req: TalkerRequest) -> torch.Tensor:
    """[U + 9, hidden] input rows of the talker's prompt for `req` (its head rows have arrived)."""
    spec = model.spec
    parts = []
    users = user_positions(req.prompt_ids, spec.tokens)
    if users:
        parts.append(_user_rows(model, req, users))
    a = req.assistant_start
    head = model.text_projection(req.rows(a, a + HEAD_ROWS))  # [4, hidden]
    bos, _, pad = model.tts_rows()  # each [hidden]
    text = torch.cat([head[:3], pad.expand(4, -1), bos[None], head[3:4]])  # [9, hidden]
    ids = [req.speaker_id if f is None else spec.codec[f] for f in CODEC_HEAD]
    codec = torch.cat([text.new_zeros(3, text.shape[1]), model.codec_embed(torch.tensor(ids))])  # [9, hidden]
    parts.append(text + codec)
    return torch.cat(parts)


def _user_rows(model: Talker, req: TalkerRequest, users: list[int]) -> torch.Tensor:
    multimodal = [req.prompt_ids[p] in model.spec.multimodal_ids for p in users]
    embeds = req.rows(0, len(req.prompt_ids))
    out = model.text_projection(embeds[users])  # [U, hidden]
    if any(multimodal):
        mm = [p for p, m in zip(users, multimodal) if m]
        hidden = req.rows(0, len(req.prompt_ids), hidden=True)
        out[torch.tensor(multimodal)] = model.hidden_projection(hidden[mm])
    return out


def talker_media(model: Talker, req: TalkerRequest, num_rows: int) -> PromptMedia | None:
    """The multimodal rope ids of a talker prompt of `num_rows` rows; None for 1-D ones."""
    if not req.image_grids and not req.videos:
        return None
    spec = model.spec
    ids = [req.prompt_ids[p] for p in user_positions(req.prompt_ids, spec.tokens)]
    ids += [spec.tokens["tts_pad_token_id"]] * (num_rows - len(ids))
    none = torch.zeros(0)
    images = [ImageRows(none, [], g) for g in req.image_grids]
    videos = [ImageRows(none, [], g, seconds) for g, seconds in req.videos]
    positions, delta = vision_rope(ids, images, videos, spec.media)
    return PromptMedia(positions, delta, torch.zeros(0, dtype=torch.int64),
                       torch.zeros(0, spec.decoder.hidden_size))
