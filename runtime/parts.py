"""Port values in parts: a chunk of streamed items or an accumulated loop output
travels as "port#0", "port#1", ... and reaches the component concatenated."""
from __future__ import annotations

from typing import Any

PART_SEP = "#"


def part_name(port: str, index: int) -> str:
    return f"{port}{PART_SEP}{index}"


def join_parts(tensors: dict[str, Any]) -> dict[str, Any]:
    """Concatenates each port's parts along dim 0, in part order; whole values pass."""
    if not any(PART_SEP in name for name in tensors):
        return tensors
    import torch

    out: dict[str, Any] = {}
    parts: dict[str, list[tuple[int, Any]]] = {}
    for name, tensor in tensors.items():
        port, sep, index = name.partition(PART_SEP)
        if sep:
            parts.setdefault(port, []).append((int(index), tensor))
        else:
            out[name] = tensor
    for port, items in parts.items():
        out[port] = torch.cat([t for _, t in sorted(items, key=lambda p: p[0])], dim=0)
    return out


def resolve_inputs(transport: Any, refs: dict, field: str, handles: list, request_id: str) -> dict[str, Any]:
    """Resolves every ref of a node run's inputs and joins their parts. Each resolved
    handle is appended to `handles` (the run's, so its NodeDone releases them); a bad ref
    is a FieldError naming `field[name]`."""
    from core.errors import FieldError, StarmeshError

    tensors = {}
    for name, ref in refs.items():
        try:
            resolved = transport.resolve(ref, request_id=request_id)
        except StarmeshError as e:
            raise FieldError(e, f"{field}[{name}]: {e}") from None
        handles.append(resolved)
        tensors[name] = resolved.tensor
    return join_parts(tensors)
