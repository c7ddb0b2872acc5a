"""How much one request may bring through the front door (`Conductor.Generate`).

One request's inputs travel to the services on the Run streams every request to a
replica shares; a request past these limits is refused alone, with INVALID_ARGUMENT
naming the input and the limit, before any of it is sent. gRPC's own receive limit
(`starmesh conductor --max-message-mb`) bounds the wire message before it is decoded;
these bound what it decodes to.

    InputLimits(max_input_bytes=16 << 20)    # `starmesh conductor --max-input-mb 16`
"""
from __future__ import annotations

from dataclasses import dataclass, fields

MiB = 1 << 20


def check_counts(config, prefix: str) -> None:
    """Every field of the dataclass `config` is an integer >= 1 (ValueError naming
    `prefix`.field otherwise)."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{prefix}.{f.name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class InputLimits:
    """max_input_bytes: one input (a named tensor's bytes; input_ids at their width);
    max_request_bytes: every input, the params and the text together;
    max_text_bytes: `text`, or every message's text parts together, in UTF-8 bytes: counted
    before any tokenization (a model's prompt input may bound it lower, its InputSpec);
    max_input_ids: ids in input_ids (a long prompt of any real model fits);
    max_inputs: named tensors; max_rank: dimensions of one tensor;
    max_params_bytes: the params Struct as encoded; max_name_len: characters of the
    model name, request id, and each input and output name; max_outputs: output names;
    max_messages: chat messages; max_parts: content parts over every message."""

    max_input_bytes: int = 16 * MiB
    max_request_bytes: int = 32 * MiB
    # max_input_ids of a real vocabulary's text is about 1 MiB (3-4 bytes a token); tokenizing
    # costs ~2 s a MiB on one core, off the event loop (conductor.request_intake).
    max_text_bytes: int = 2 * MiB
    max_input_ids: int = 1 << 18
    max_inputs: int = 16
    max_rank: int = 8
    max_params_bytes: int = 64 << 10
    max_name_len: int = 256
    max_outputs: int = 32
    max_messages: int = 1024
    max_parts: int = 4096

    def __post_init__(self) -> None:
        check_counts(self, "input_limits")
        if self.max_input_bytes > self.max_request_bytes:
            raise ValueError(f"input_limits.max_input_bytes ({self.max_input_bytes}) must be <= "
                             f"max_request_bytes ({self.max_request_bytes})")
