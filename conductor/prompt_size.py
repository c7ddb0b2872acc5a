"""A request's text and chat messages bounded by their size, cheapest measure first,
before anything encodes, renders or tokenizes them.

    check_prompt_size(req, model, limits)               # on the event loop: counts only
    nbytes = check_prompt_size(req, model, limits, exact=True)  # off it: UTF-8 bytes

Counts first: messages, then content parts (each a length of a repeated field), then the
text's characters (each at least one UTF-8 byte, so a text past the limit in characters
is past it in bytes, with nothing encoded); only then the bytes. A 20 MB `text` is
refused here in microseconds, naming the field and the limit, where tokenizing it would
take the conductor tens of seconds.
"""
from __future__ import annotations

from conductor.input_limits import InputLimits
from conductor.model import ServedModel
from core.errors import InvalidArgument


def text_limit(model: ServedModel, limits: InputLimits) -> tuple[int, str]:
    """(the most UTF-8 bytes of text `model` takes, the name of what sets it): max_text_bytes,
    or a lower bound of the input its text becomes (an image prompt's InputSpec.max_bytes)."""
    fmt = model.prompt
    spec = model.input_specs.get(fmt.input_name) if fmt is not None else None
    if spec is not None and spec.max_bytes and spec.max_bytes < limits.max_text_bytes:
        return spec.max_bytes, f"the {fmt.input_name} input of model {model.name!r}"
    return limits.max_text_bytes, "max_text_bytes"


def check_prompt_size(req, model: ServedModel, limits: InputLimits, exact: bool = False) -> int:
    """The request's text size (characters; UTF-8 bytes when `exact`), InvalidArgument
    naming the field past a limit. req: a GenerateRequest."""
    if len(req.messages) > limits.max_messages:
        raise InvalidArgument(f"messages has {len(req.messages)} messages, over the limit of {limits.max_messages} "
                              "(max_messages)")
    num_parts = sum(len(m.content) for m in req.messages)
    if num_parts > limits.max_parts:
        raise InvalidArgument(f"messages have {num_parts} content parts, over the limit of {limits.max_parts} "
                              "(max_parts)")
    field, texts = ("text", [req.text]) if req.text else ("messages", _message_texts(req))
    limit, why = text_limit(model, limits)
    size = sum(len(t) for t in texts)
    if size > limit:
        raise InvalidArgument(f"{field} is {size} characters, over the limit of {limit} UTF-8 bytes ({why})")
    if exact:
        size = sum(len(t.encode()) for t in texts)
        if size > limit:
            raise InvalidArgument(f"{field} is {size} bytes (UTF-8), over the limit of {limit} ({why})")
    return size


def _message_texts(req) -> list[str]:
    return [p.text for m in req.messages for p in m.content if p.WhichOneof("part") == "text"]
