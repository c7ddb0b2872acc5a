"""One batch, several frames: a RunRequest or RunResponse never exceeds the message limit.

A batch groups many requests' items (one engine step, one message); together they may
pass the transport's limit although each is small, and gRPC would then fail the whole
shared stream. `split` cuts the batch's repeated field into consecutive messages of at
most `limit` bytes, in order; an entry that alone passes the limit cannot be sent at
all and is returned apart, so its caller fails that one request and nothing else.
"""
from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import Message

from runtime.items import AcceptRoute, NodeError

M = TypeVar("M", bound=Message)

# Framing of one entry inside its message: a tag byte and a varint length of at most 5
# bytes (entries are far below 4 GiB); counting it for every entry keeps parts under the limit.
_ENTRY_OVERHEAD = 6


def split(msg: M, field: str, limit: int) -> tuple[list[M], list[int]]:
    """(messages of at most `limit` bytes holding the entries of `msg.<field>` in order,
    indices of the entries too large to send alone). A message within the limit comes
    back as is."""
    if msg.ByteSize() <= limit:
        return [msg], []
    head = _without(msg, field)  # every part carries the other fields (a RunRequest's sender)
    base = head.ByteSize()
    parts: list[M] = []
    oversized: list[int] = []
    current, size = None, 0
    for i, entry in enumerate(getattr(msg, field)):
        entry_size = entry.ByteSize() + _ENTRY_OVERHEAD
        if base + entry_size > limit:
            oversized.append(i)
            continue
        if current is None or size + entry_size > limit:
            current = type(msg)()
            current.CopyFrom(head)
            size = base
            parts.append(current)
        getattr(current, field).add().CopyFrom(entry)
        size += entry_size
    return parts, oversized


def _without(msg: M, field: str) -> M:
    """A copy of `msg`'s other (singular) fields."""
    head = type(msg)()
    for descriptor, value in msg.ListFields():
        if descriptor.name == field:
            continue
        if descriptor.message_type is not None:
            getattr(head, descriptor.name).CopyFrom(value)
        else:
            setattr(head, descriptor.name, value)
    return head


def oversized_error(entry, limit: int) -> NodeError:
    """The failure of the request whose Run item or event could not be sent alone
    (split's leftovers): an OpenNode, PushChunk or grant, or an inline output."""
    run = entry.run if isinstance(entry, AcceptRoute) else entry
    node = getattr(run, "node", "")
    return NodeError(run.request_id, node, "RESOURCE_EXHAUSTED",
                     f"{type(entry).__name__} of request {run.request_id!r} (node {node}) passes the {limit}-byte "
                     "message limit: large tensors must go by reference (shared memory or Mooncake), not inline",
                     tuple(getattr(run, "iteration", ())))
