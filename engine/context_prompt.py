"""What a context keeps of a sequence, and the prompt of a request that continues it.

A context keeps its tokens' ids and the inputs that shaped their K/V: fed embedding rows
(the talker's: row p is the input at position p) and media (rows spliced in, rope ids of
every position and the `delta` decode positions go on with). A continuation's prompt is
the context's tokens followed by the request's; its rows and rope ids go on from there.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument
from engine.prompt_media import PromptMedia, continued_media, media_head


@dataclass(frozen=True)
class Content:
    token_ids: tuple[int, ...]        # its tokens; the next position is their count
    num_computed: int                 # leading tokens whose K/V are in the context's blocks
    embeds: torch.Tensor | None = None  # [num_tokens, hidden] fed input rows, or None (fed ids)
    media: PromptMedia | None = None    # covering num_tokens positions, or None (plain text)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def head(self, num_tokens: int) -> "Content":
        """The first num_tokens tokens (0 < num_tokens <= self.num_tokens)."""
        return Content(self.token_ids[:num_tokens], min(self.num_computed, num_tokens),
                       None if self.embeds is None else self.embeds[:num_tokens],
                       None if self.media is None else media_head(self.media, num_tokens))


def content_of(seq, prompt_only: bool = False) -> Content:
    """What a finished sequence leaves: every token (the last sampled one included, its K/V
    not computed yet) or only its prompt (all computed). A sequence fed rows keeps the
    tokens it has rows for."""
    n = seq.num_prompt_tokens if prompt_only else seq.num_tokens
    embeds = None
    if seq.input_embeds is not None:
        n = min(n, len(seq.input_embeds))
        embeds = seq.input_embeds.rows(0, n).clone()
    media = None if seq.media is None else media_head(seq.media, n)
    return Content(tuple(seq.token_ids[:n]), min(seq.num_cached_tokens, n), embeds, media)


def continuation(content: Content, prompt_ids: list[int], prompt_embeds: torch.Tensor | None,
                 media: PromptMedia | None) -> tuple[list[int], torch.Tensor | None, PromptMedia | None]:
    """The full prompt (ids, fed rows, media) of a request that continues `content` with
    prompt_ids (and their rows / media, built as a prompt of their own)."""
    if (content.embeds is None) != (prompt_embeds is None):
        raise InvalidArgument("prompt_embeds: a context fed embedding rows is continued with rows, one fed ids "
                              "with ids only")
    ids = list(content.token_ids) + [int(t) for t in prompt_ids]
    embeds = None
    if prompt_embeds is not None:
        if prompt_embeds.dim() != 2 or prompt_embeds.shape[1] != content.embeds.shape[1]:
            raise InvalidArgument(f"prompt_embeds must be [n, {content.embeds.shape[1]}], got "
                                  f"{tuple(prompt_embeds.shape)}")
        embeds = torch.cat([content.embeds, prompt_embeds.to(content.embeds.dtype)])
    if media is not None and media.num_prompt != len(prompt_ids):
        raise InvalidArgument(f"media covers {media.num_prompt} positions, the new prompt has {len(prompt_ids)}")
    return ids, embeds, continued_media(content.media, content.num_tokens, media, len(prompt_ids))
