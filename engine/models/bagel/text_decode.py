"""Greedy text decoding on BAGEL's KV contexts, several at once.

A TextDecode is one context's decode in flight: the id it feeds next (`<|im_start|>`
first), the ids decoded so far. decode_step() advances every decode not yet done by one
token in one forward: each feeds its last id ([1] row at its context's rope position,
written into its context), the logits of the batch's [n, hidden] last rows give each
its next id. A decode is done at the end id (not kept) or at max_new_tokens ids (the
last one not fed). A decode alone is the same loop with one row per step, so a request
decodes the same ids alone or beside others.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.models.bagel.kv_contexts import BagelKV, KVContext
from engine.models.bagel.rows import text_rows


@dataclass(eq=False)
class TextDecode:
    ctx: KVContext
    token: int                                    # the id fed next
    end_id: int
    max_new_tokens: int
    ids: list[int] = field(default_factory=list)  # decoded so far, the end id excluded
    fed: int = 0                                  # of ids, those whose K/V are in ctx
    done: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"TextDecode: max_new_tokens must be >= 1, got {self.max_new_tokens}")


def decode_step(kv: BagelKV, decodes: list[TextDecode]) -> None:
    """One more id for every decode not done, in one forward. A failing forward changes
    no decode (retrying it, alone or with others, is safe)."""
    live = [d for d in decodes if not d.done]
    if not live:
        return
    items, ropes = [], []
    for d in live:
        rows, rope = text_rows(kv.model, [d.token], d.ctx.rope)
        items.append((d.ctx, rows))
        ropes.append(rope)
    hidden = kv.extend(items)
    logits = kv.model.compute_logits(torch.cat([h[-1:] for h in hidden]))  # [n, vocab]
    for d, rope, token in zip(live, ropes, logits.argmax(-1).tolist()):
        d.ctx.rope = rope
        d.fed = len(d.ids)
        if token == d.end_id:
            d.done = True
            continue
        d.ids.append(token)
        d.token = token
        d.done = len(d.ids) >= d.max_new_tokens


def decode_alone(kv: BagelKV, decode: TextDecode) -> list[int]:
    while not decode.done:
        decode_step(kv, [decode])
    return decode.ids
