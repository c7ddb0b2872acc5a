"""A request's failure in the client's terms: the field of the request at fault, not the
node and item where a service found it.

A service refuses a request where it finds the fault, and the runtime and the executor
say where: "node talker: items[0].open (node talker): params.max_frames is 5000, ...".
A client needs the field it sent, first (the gateway maps a leading field to its own
name: `params.max_new_tokens` -> `max_tokens`). Three shapes are put in those terms:

- a service's message that starts with a request param (`params.NAME ...`): the message
  alone, without the location;
- the engines' context check, "prompt (P tokens) + max_new_tokens (M) = T is past the
  context length C": `params.max_new_tokens` when the request set it and the prompt
  leaves room, else the field the prompt came in (`messages`, `text` or `input_ids`);
- the encoder's refusal of a media part, "open.inputs[image][1]: corrupt image data"
  (the request's second image): the content part it came in, by message and index and
  kind, "messages[0].content[3].image: corrupt image data".

Anything else keeps the executor's message. The request's trace keeps the original.
"""
from __future__ import annotations

import re
from typing import Collection

_FIELD_STATUSES = ("INVALID_ARGUMENT", "OUT_OF_RANGE", "NOT_FOUND")  # NOT_FOUND: an unknown params.context_id
_NODE = re.compile(r"^(?:node [^:\s]+: )+")  # the service's and the executor's "node NAME: "
_ITEM = re.compile(r"^items\[\d+\](?:\.\w+)* \(node [^)]+\): ")
_PARAM = re.compile(r"^params\.\w+\b")
_MEDIA = re.compile(r"^open\.inputs\[(audio|image|video)\](?:\[(\d+)\])?")
_CONTEXT = re.compile(r"^prompt \((\d+) tokens\) \+ max_new_tokens \((\d+)\) = \d+ is past the context "
                      r"length (\d+)$")


def prompt_field(request) -> str | None:
    """The field a GenerateRequest's prompt came in (None: it has none)."""
    if len(request.messages):
        return "messages"
    if request.text:
        return "text"
    return "input_ids" if len(request.input_ids) else None


def client_failure(error, request):
    """`error`, the executor's RequestFailed for a GenerateRequest `request`, as the same
    error with its message in the client's terms."""
    message = in_client_terms(error.status, str(error), prompt_field(request), request.params.fields,
                              media_fields(request))
    return type(error)(error.status, message)


def media_fields(request) -> list[tuple[str, str]]:
    """(kind, field) of each media part of a GenerateRequest's messages, in prompt order:
    ("image", "messages[0].content[1].image")."""
    out = []
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.content):
            kind = part.WhichOneof("part")
            if kind not in (None, "text"):
                out.append((kind, f"messages[{i}].content[{j}].{kind}"))
    return out


def in_client_terms(status: str, message: str, prompt: str | None, set_params: Collection[str],
                    media: list[tuple[str, str]] = ()) -> str:
    """`message` (the executor's, for a request that failed with `status`) naming the
    request's field first where it is one of the shapes above; else unchanged.
    prompt: prompt_field(request); set_params: the param keys the request set; media:
    media_fields(request)."""
    if status not in _FIELD_STATUSES:
        return message
    detail = _ITEM.sub("", _NODE.sub("", message, count=1), count=1)
    if _PARAM.match(detail):
        return detail
    part = _MEDIA.match(detail)
    if part is not None:
        fields = [f for kind, f in media if kind == part.group(1)]
        at = int(part.group(2) or 0)
        return fields[at] + detail[part.end():] if at < len(fields) else message
    found = _CONTEXT.match(detail)
    if found is None:
        return message
    num_prompt, max_new, context = (int(g) for g in found.groups())
    return _context_message(num_prompt, max_new, context, prompt, "max_new_tokens" in set_params) or message


def _context_message(num_prompt: int, max_new: int, context: int, prompt: str | None,
                     set_max_new: bool) -> str | None:
    room = context - num_prompt
    if set_max_new and room > 0:
        return (f"params.max_new_tokens is {max_new}, past what the context holds after the prompt's "
                f"{num_prompt} tokens: at most {room} (context length {context})")
    if prompt is None:
        return None
    if room <= 0:
        return f"{prompt} is too long: its prompt is {num_prompt} tokens, and the context holds {context}"
    return (f"{prompt} is too long: its prompt is {num_prompt} tokens, and with max_new_tokens {max_new} "
            f"(the default) it passes the context length {context}; shorten it or set max_new_tokens to at "
            f"most {room}")
