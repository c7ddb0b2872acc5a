"""A GenerateRequest's `text` or `messages` as the walk input the model's prompt format
makes (ServedModel.prompt: pipelines/prompt_format.py), checked before any work.

    inputs = prompt_inputs(req, model, tokenizer, params, limits)   # {} when neither is set

Either `text` (one user turn) or `messages`, never both, and never with `input_ids` or
an input of the same name; every message has a known role and text content parts.
"""
from __future__ import annotations

from typing import Any, Mapping

from conductor.input_limits import InputLimits
from conductor.model import ServedModel
from core.errors import InvalidArgument

ROLES = ("system", "user", "assistant")


def chat_messages(req, limits: InputLimits) -> list[dict]:
    """[{"role", "content"}] of `text` or `messages` ([] when neither is set)."""
    if req.text and len(req.messages):
        raise InvalidArgument("text and messages are both set: give one")
    if req.text:
        return [{"role": "user", "content": req.text}]
    if len(req.messages) > limits.max_messages:
        raise InvalidArgument(f"messages has {len(req.messages)} messages, over the limit of {limits.max_messages} "
                              "(max_messages)")
    out = []
    for i, message in enumerate(req.messages):
        if message.role not in ROLES:
            raise InvalidArgument(f"messages[{i}].role must be one of {list(ROLES)}, got {message.role[:32]!r}")
        parts = []
        for j, part in enumerate(message.content):
            if part.WhichOneof("part") != "text":
                raise InvalidArgument(f"messages[{i}].content[{j}] has no part set (text parts only, for now)")
            parts.append(part.text)
        out.append({"role": message.role, "content": "".join(parts)})
    return out


def prompt_inputs(req, model: ServedModel, tokenizer, params: Mapping[str, Any], limits: InputLimits) -> dict:
    """walk input name -> a one-item tuple holding the formatted prompt ({} without text)."""
    import torch

    from conductor.generate_request import input_ids_tensor

    messages = chat_messages(req, limits)
    if not messages:
        return {}
    fmt = model.prompt
    if fmt is None:
        raise InvalidArgument(f"text/messages: model {model.name!r} takes no text; send its inputs "
                              f"({sorted(_input_names(model))})")
    if len(req.input_ids) or any(nt.name == fmt.input_name for nt in req.inputs):
        raise InvalidArgument(f"text/messages and {fmt.input_name} are both set: give one")
    if fmt.needs_tokenizer and tokenizer is None:
        raise InvalidArgument(f"text/messages: model {model.name!r} has no tokenizer on this conductor; "
                              "send input_ids")
    if fmt.needs_tokenizer:
        ids, _ = input_ids_tensor(fmt.ids(tokenizer, messages, params), limits)
        return {fmt.input_name: (ids,)}
    data = fmt.text(messages).encode()
    return {fmt.input_name: (torch.tensor(list(data), dtype=torch.uint8),)}


def _input_names(model: ServedModel) -> set[str]:
    return {name for walk in model.graph.walks for name in walk.input_names}
