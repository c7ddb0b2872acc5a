"""A GenerateRequest's `text` or `messages` as the walk input the model's prompt format
makes (ServedModel.prompt: pipelines/prompt_format.py), checked before any work.

    inputs = prompt_inputs(req, model, tokenizer, params, limits)   # {} when neither is set

Either `text` (one user turn) or `messages`, never both, and never with `input_ids` or
an input of the same name; every message has a known role and text, audio, image or
video content parts. A message with media has its content as the parts' list
([{"type": "image"}, {"type": "text", "text": ...}, {"type": "audio"}, ...], in the
client's order, any number of each kind), which the checkpoint's chat template renders
as one placeholder per part; the parts' bytes become one list in prompt order, the walk
inputs `media` and `media_parts` (conductor.media_parts).
"""
from __future__ import annotations

from typing import Any, Mapping

from conductor.input_limits import InputLimits
from conductor.media_parts import MEDIA_INPUTS, MediaParts
from conductor.model import ServedModel
from core.errors import InvalidArgument

ROLES = ("system", "user", "assistant")


def chat_messages(req, media: MediaParts | None = None) -> list[dict]:
    """[{"role", "content"}] of `text` or `messages` ([] when neither is set), whose sizes
    conductor.prompt_size checked; media parts go to `media` (refused when it is None)."""
    if req.text and len(req.messages):
        raise InvalidArgument("text and messages are both set: give one")
    if req.text:
        return [{"role": "user", "content": req.text}]
    out = []
    for i, message in enumerate(req.messages):
        if message.role not in ROLES:
            raise InvalidArgument(f"messages[{i}].role must be one of {list(ROLES)}, got {message.role[:32]!r}")
        parts = []
        for j, part in enumerate(message.content):
            kind, where = part.WhichOneof("part"), f"messages[{i}].content[{j}]"
            if kind is None:
                raise InvalidArgument(f"{where} has no part set (text, audio, image or video)")
            if kind == "text":
                parts.append({"type": "text", "text": part.text})
                continue
            if media is None:
                raise InvalidArgument(f"{where}: {kind} parts are not taken here")
            media.add(kind, getattr(part, kind), where)
            parts.append({"type": kind})
        if all(p["type"] == "text" for p in parts):
            out.append({"role": message.role, "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": message.role, "content": parts})
    return out


def prompt_inputs(req, model: ServedModel, tokenizer, params: Mapping[str, Any], limits: InputLimits) -> dict:
    """walk input name -> a one-item tuple holding the formatted prompt ({} without text)."""
    import torch

    from conductor.generate_request import input_ids_tensor

    media = MediaParts(limits)
    messages = chat_messages(req, media)
    if not messages:
        return {}
    media.check_model(model.input_names, model.name)
    fmt = model.prompt
    if fmt is None:
        raise InvalidArgument(f"text/messages: model {model.name!r} takes no text; send its inputs "
                              f"({sorted(model.input_names)})")
    if len(req.input_ids) or any(nt.name == fmt.input_name for nt in req.inputs):
        raise InvalidArgument(f"text/messages and {fmt.input_name} are both set: give one")
    if media and any(nt.name in MEDIA_INPUTS for nt in req.inputs):
        raise InvalidArgument(f"messages with media parts and inputs {list(MEDIA_INPUTS)} are both set: give one")
    if fmt.needs_tokenizer and tokenizer is None:
        raise InvalidArgument(f"text/messages: model {model.name!r} has no tokenizer on this conductor; "
                              "send input_ids")
    if fmt.needs_tokenizer:
        ids, _ = input_ids_tensor(fmt.ids(tokenizer, messages, params), limits)
        return {fmt.input_name: (ids,), **media.inputs()}
    data = fmt.text(messages).encode()
    prompt = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # not a list of 2^21 ints
    return {fmt.input_name: (prompt,), **media.inputs()}


