"""One request on the talker: the thinker rows it has received and where its text stands.

The thinker's rows arrive in position order: its prompt's input embeddings (and the
accept-layer hidden states), then one row per decode step (the embedding of the token
that step fed). The last generated token is never fed, so it never arrives; the end of
the stream says the thinker is done (HF: `thinker_embed` is hidden_states[0] of every
generate step).

Following HF's Qwen3OmniMoeForConditionalGeneration.generate for one sequence, with
`a` the last `<|im_start|>assistant` position of the prompt and R the rows received:
  prompt   = user rows (projected) + the 9-row assistant head, which needs rows a..a+3;
  text(g)  = text_projection(R[a+4+g]) while that row exists,
             tts_eos at g = max(0, len(R) - (a+4)) once the thinker is done, tts_pad after.
"""
from __future__ import annotations

import torch

from core.errors import InvalidArgument
from engine.embed_rows import EmbedRows
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

HEAD_ROWS = 4  # <|im_start|> assistant \n + the first text token


class TalkerRequest:
    def __init__(self, request_id: str, prompt_ids: list[int], params: SamplingParams, speaker_id: int,
                 tokens: dict, image_grids: tuple = ()) -> None:
        self.request_id = request_id
        self.image_grids = tuple(tuple(int(v) for v in g) for g in image_grids)  # (t, h, w) per prompt image
        # ((t, h, w), seconds per temporal patch) per prompt video: set by set_videos before the
        # prompt's rows arrive (the talker's rope reads them when its prompt goes in)
        self.videos: tuple = ()
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.params = params
        self.speaker_id = speaker_id
        self.assistant_start = _assistant_start(self.prompt_ids, tokens)
        # Thinker rows by position, copied into growing buffers: read every step, appended
        # one at a time, so neither a concatenation per read nor one per arrival.
        self.embeds: EmbedRows | None = None   # [num_rows, thinker_hidden]
        self.hidden: EmbedRows | None = None   # same, accept-layer hidden (multimodal prompts)
        self.num_rows = 0
        self.thinker_done = False
        self.seq: Sequence | None = None       # its engine sequence, once its prompt went in
        self.generation_step = 0               # g: the text row the next input takes
        self.pending: torch.Tensor | None = None  # [hidden] codec part of the next input, waiting for text
        self.num_frames = 0
        self.context = None                    # engine.contexts.ContextRequest of its sequence, or None
        self.cache_salt = ""

    def add_rows(self, embeds: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """embeds (and hidden) [n, thinker_hidden] of the next thinker positions."""
        if self.thinker_done:
            raise InvalidArgument(f"request {self.request_id!r}: thinker rows after the end of its stream")
        if embeds.dim() != 2 or (hidden is not None and hidden.shape != embeds.shape):
            raise InvalidArgument(f"thinker rows must be [n, hidden] (embeds and hidden alike), got "
                                  f"{tuple(embeds.shape)} / {None if hidden is None else tuple(hidden.shape)}")
        if embeds.shape[0] == 0:
            return
        self.embeds = _extended(self.embeds, embeds)
        if hidden is not None:
            self.hidden = _extended(self.hidden, hidden)
        self.num_rows += embeds.shape[0]

    def rows(self, start: int, end: int, hidden: bool = False) -> torch.Tensor:
        """Thinker rows start:end ([end - start, thinker_hidden]), a view of this request's
        buffer: read-only by contract."""
        buf = self.hidden if hidden else self.embeds
        if hidden and (buf is None or len(buf) < end):
            raise InvalidArgument(f"request {self.request_id!r}: multimodal prompt positions need the "
                                  "thinker's hidden states")
        if buf is None:
            raise InvalidArgument(f"request {self.request_id!r}: no thinker rows have arrived")
        return buf.rows(start, end)

    @property
    def can_start(self) -> bool:
        """The assistant head's rows are here (the thinker fed its first text token)."""
        return self.num_rows >= self.assistant_start + HEAD_ROWS

    @property
    def never_starts(self) -> bool:
        """The thinker ended before feeding a text token: nothing to speak (HF cannot either)."""
        return self.thinker_done and not self.can_start

    def text_source(self, g: int) -> str | int | None:
        """What text row g is: a thinker row index, "eos", "pad", or None (not arrived yet)."""
        index = self.assistant_start + HEAD_ROWS + g
        if index < self.num_rows:
            return index
        if not self.thinker_done:
            return None
        return "eos" if g == max(0, self.num_rows - self.assistant_start - HEAD_ROWS) else "pad"


def _extended(buf: EmbedRows | None, rows: torch.Tensor) -> EmbedRows:
    if buf is None:
        return EmbedRows(rows)
    buf.extend(rows)
    return buf


def _assistant_start(ids: list[int], tokens: dict) -> int:
    start, assistant = tokens["im_start_token_id"], tokens["assistant_token_id"]
    found = [i for i in range(len(ids) - 1) if ids[i] == start and ids[i + 1] == assistant]
    if not found:
        raise InvalidArgument("prompt has no '<|im_start|>assistant' turn for the talker to speak")
    return found[-1]


def set_videos(req: TalkerRequest, grids: tuple, seconds: tuple) -> None:
    """Gives `req` its prompt's videos (grids (t, h, w) and seconds per temporal patch, prompt order)."""
    if len(grids) != len(seconds):
        raise InvalidArgument(f"{len(grids)} video grids but {len(seconds)} video seconds")
    req.videos = tuple((tuple(int(v) for v in g), float(s)) for g, s in zip(grids, seconds))
