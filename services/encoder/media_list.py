"""A request's media parts as they travel, before and after encoding: a list of parts of
several kinds in prompt order rides a fixed set of typed ports (a node fires when all of
its inputs are present, so one media node serves every combination and order).

Before encoding (the walk inputs the conductor makes of a message's content parts):
    media        uint8 [n]       every part's file bytes, concatenated in prompt order
    media_parts  int64 [k, 2]    per part (kind, byte length); kind indexes MEDIA_KINDS

After encoding (the encoder's outputs, a media prefill's inputs):
    rows         float32 [R, hidden]          every part's rows, in part order
    deepstack    float32 [L, D, hidden]       the rows some towers add at the first L decoder
                                              layers, for the parts that have them, in part order
    parts        int64 [k, 6]                 per part (kind, rows, deepstack rows (0 or rows),
                                              t, h, w): (t, h, w) is the part's patch grid,
                                              (0, 0, 0) for a sequence (audio)
    seconds      float32 [k]                  seconds per temporal patch (0: untimed)

Every check names the field it read (`open.inputs[media_parts]`, ...). A part's own field
is `open.inputs[<kind>]`, or `open.inputs[<kind>][i]` (its kind's i-th) when the request
holds several of its kind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch

from core.errors import InvalidArgument
from core.media_kinds import MEDIA_KINDS, media_manifest

# The kind codes of media_parts and parts. The conductor's front door writes the same
# codes (conductor/media_parts.py); a test checks that both agree.
MEDIA_INPUTS = ("media", "media_parts")
ENCODED_PORTS = ("rows", "deepstack", "parts", "seconds")
_KIND, _ROWS, _DEEP, _T, _H, _W = range(6)


@dataclass(frozen=True)
class RawPart:
    """One part of a request before encoding: its kind, its file's bytes and its field."""

    kind: str
    data: bytes
    field: str


@dataclass(frozen=True)
class EncodedPart:
    """One part after its tower: rows [n, hidden]; deepstack [layers, n, hidden] (layers may
    be 0); grid (t, h, w) in patches ((0, 0, 0): a sequence); seconds per temporal patch
    (0: untimed)."""

    rows: torch.Tensor
    deepstack: torch.Tensor | None = None
    grid: tuple[int, int, int] = (0, 0, 0)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if not self.rows.dtype.is_floating_point or self.rows.dim() != 2 or self.rows.shape[0] == 0:
            raise InvalidArgument(f"EncodedPart.rows must be floating [n > 0, hidden], got {self.rows.dtype} "
                                  f"{tuple(self.rows.shape)}")
        deep = self.deepstack if self.deepstack is not None else self.rows.new_zeros((0, *self.rows.shape))
        if deep.dim() != 3 or tuple(deep.shape[1:]) != tuple(self.rows.shape):
            raise InvalidArgument(f"EncodedPart.deepstack must be [layers, {self.rows.shape[0]}, "
                                  f"{self.rows.shape[1]}], got {tuple(deep.shape)}")
        object.__setattr__(self, "deepstack", deep)
        grid = tuple(int(v) for v in self.grid)
        if len(grid) != 3 or min(grid) < 0:
            raise InvalidArgument(f"EncodedPart.grid must be 3 integers >= 0 (t, h, w), got {self.grid}")
        object.__setattr__(self, "grid", grid)
        if not math.isfinite(self.seconds) or self.seconds < 0:
            raise InvalidArgument(f"EncodedPart.seconds must be finite and >= 0, got {self.seconds}")


def part_field(kinds: list[str], i: int) -> str:
    """The field naming part i: open.inputs[image], or open.inputs[image][1] for the second of several."""
    kind = kinds[i]
    if kinds.count(kind) == 1:
        return f"open.inputs[{kind}]"
    return f"open.inputs[{kind}][{kinds[:i].count(kind)}]"


def _tensor(inputs: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    value = inputs.get(name)
    if value is None:
        raise InvalidArgument(f"open.inputs: {name!r} is missing (got {sorted(inputs)})")
    return value


def _manifest(inputs: Mapping[str, torch.Tensor], name: str, columns: int) -> torch.Tensor:
    """The integer [k > 0, columns] manifest `name`, kind codes checked."""
    table = _tensor(inputs, name)
    if table.dtype.is_floating_point or table.dtype == torch.bool or table.dim() != 2 or table.shape[1] != columns:
        raise InvalidArgument(f"open.inputs[{name}] must be integer [k, {columns}], got {table.dtype} "
                              f"{tuple(table.shape)}")
    if table.shape[0] == 0:
        raise InvalidArgument(f"open.inputs[{name}] holds no parts")
    table = table.to(torch.int64)
    bad = (table[:, _KIND] < 0) | (table[:, _KIND] >= len(MEDIA_KINDS)) | (table[:, 1:] < 0).any(dim=1)
    if bad.any():
        at = int(torch.nonzero(bad)[0])
        raise InvalidArgument(f"open.inputs[{name}][{at}] is {table[at].tolist()}: a kind code in "
                              f"0..{len(MEDIA_KINDS) - 1} ({', '.join(MEDIA_KINDS)}) and counts >= 0")
    return table


def pack_media(parts: list[tuple[str, bytes]]) -> dict[str, torch.Tensor]:
    """The walk inputs of parts (kind, file bytes) in prompt order."""
    codes = media_manifest(parts)
    return {"media": torch.frombuffer(bytearray(b"".join(d for _, d in parts)), dtype=torch.uint8),
            "media_parts": torch.tensor(codes, dtype=torch.int64).reshape(-1, 2)}


def unpack_media(inputs: Mapping[str, torch.Tensor]) -> list[RawPart]:
    """The parts of the walk inputs media and media_parts, in prompt order."""
    data = _tensor(inputs, "media")
    if data.dtype != torch.uint8 or data.dim() != 1:
        raise InvalidArgument(f"open.inputs[media]: expected uint8 [n] (the parts' files), got {data.dtype} "
                              f"{tuple(data.shape)}")
    table = _manifest(inputs, "media_parts", 2)
    sizes = table[:, 1].tolist()
    if sum(sizes) != data.numel():
        raise InvalidArgument(f"open.inputs[media_parts]: byte lengths sum to {sum(sizes)}, but media holds "
                              f"{data.numel()} bytes")
    kinds = [MEDIA_KINDS[c] for c in table[:, _KIND].tolist()]
    blob, out, at = data.numpy().tobytes(), [], 0
    for i, size in enumerate(sizes):
        out.append(RawPart(kinds[i], blob[at:at + size], part_field(kinds, i)))
        at += size
    return out


def pack_encoded(kinds: list[str], parts: list[EncodedPart]) -> dict[str, torch.Tensor]:
    """The encoder's outputs for parts of `kinds`, in part order (float32, on the CPU)."""
    rows = torch.cat([p.rows.to(device="cpu", dtype=torch.float32) for p in parts])
    deep = [p.deepstack.to(device="cpu", dtype=torch.float32) for p in parts if p.deepstack.shape[0]]
    if len({d.shape[0] for d in deep}) > 1:
        raise InvalidArgument(f"encoded parts have deepstack rows of {sorted({d.shape[0] for d in deep})} layers")
    deepstack = torch.cat(deep, dim=1) if deep else rows.new_zeros((0, 0, rows.shape[1]))
    table = [[MEDIA_KINDS.index(k), p.rows.shape[0], p.rows.shape[0] if p.deepstack.shape[0] else 0, *p.grid]
             for k, p in zip(kinds, parts)]
    return {"rows": rows, "deepstack": deepstack, "parts": torch.tensor(table, dtype=torch.int64),
            "seconds": torch.tensor([p.seconds for p in parts], dtype=torch.float32)}


def _floating(inputs: Mapping[str, torch.Tensor], name: str, rank: int) -> torch.Tensor:
    t = _tensor(inputs, name)
    if not t.dtype.is_floating_point or t.dim() != rank:
        raise InvalidArgument(f"open.inputs[{name}] must be floating with {rank} dimensions, got {t.dtype} "
                              f"{tuple(t.shape)}")
    return t.to(torch.float32)


def unpack_encoded(inputs: Mapping[str, torch.Tensor]) -> list[tuple[str, EncodedPart]]:
    """(kind, EncodedPart) of each part of the encoder's outputs, in part order."""
    rows, deepstack = _floating(inputs, "rows", 2), _floating(inputs, "deepstack", 3)
    table, seconds = _manifest(inputs, "parts", 6), _floating(inputs, "seconds", 1)
    if seconds.shape[0] != table.shape[0]:
        raise InvalidArgument(f"open.inputs[seconds] has {seconds.shape[0]} values for {table.shape[0]} parts")
    num_rows, num_deep = table[:, _ROWS], table[:, _DEEP]
    if int(num_rows.sum()) != rows.shape[0] or int(num_deep.sum()) != deepstack.shape[1]:
        raise InvalidArgument(f"open.inputs[parts]: {int(num_rows.sum())} rows and {int(num_deep.sum())} "
                              f"deepstack rows, but rows is {tuple(rows.shape)} and deepstack "
                              f"{tuple(deepstack.shape)}")
    if deepstack.shape[1] and deepstack.shape[2] != rows.shape[1]:
        raise InvalidArgument(f"open.inputs[deepstack] rows are {deepstack.shape[2]} wide, rows "
                              f"{rows.shape[1]}")
    out, at, deep_at = [], 0, 0
    for i, (code, n, nd, t, h, w) in enumerate(table.tolist()):
        if n == 0 or nd not in (0, n):
            raise InvalidArgument(f"open.inputs[parts][{i}]: {n} rows with {nd} deepstack rows (0 or all)")
        deep = deepstack[:, deep_at:deep_at + nd] if nd else None
        try:
            part = EncodedPart(rows[at:at + n], deep, (t, h, w), float(seconds[i]))
        except InvalidArgument as e:
            raise InvalidArgument(f"open.inputs[parts][{i}]: {e}") from None
        out.append((MEDIA_KINDS[code], part))
        at, deep_at = at + n, deep_at + nd
    return out
