"""A session's conversation: its items in order, and which of them the thinker's kept
context holds (a prefix of them, ending right after a model answer's generated ids).

A turn sends what the context does not hold yet: the last answer's closing, the new
items' messages, the generation prompt (conductor.session_framing). When the context
cannot be continued (no turn yet, an item deleted or inserted before its end, other
instructions, the token bound passed: the oldest turns dropped), the turn sends the whole
conversation as ids instead and reads no context: the remaining answers go back as the
ids the model generated, never re-tokenized text.

    conv.turn(framing, instructions) -> TurnInput(ids, clips, context_id)
    conv.answered(answer, usage)       the turn completed: the context holds it all now
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from conductor.session_framing import AUDIO, ChatFraming, Message
from core.errors import InvalidArgument, NotFound
from core.session_events import Clip, Item

FRAME_MS = 80  # one talker frame (codec frame) of audio: 12.5 frames a second
AUDIO_TOKENS_PER_S = 13  # an estimate of a clip's prompt rows (12.5 a second), for the token bound


@dataclass
class Segment:
    item: Item
    answer_ids: list[int] | None = None  # a model answer's generated ids (None: a client item)
    in_context: bool = False
    start: int = 0                        # a kept answer's first position in the context


@dataclass(frozen=True)
class TurnInput:
    ids: list[int]
    clips: list[Clip]
    context_id: str                       # "" : the conversation sent whole
    items: tuple[str, ...] = ()           # the items it sends (the context holds them once answered)
    dropped: tuple[str, ...] = ()         # items the token bound dropped


@dataclass
class Conversation:
    max_tokens: int
    segments: list[Segment] = field(default_factory=list)
    context_id: str = ""
    context_tokens: int = 0               # positions the context holds
    instructions: str = ""                # those the context was built with
    dirty: bool = False                   # the context no longer matches the items

    def find(self, item_id: str, field_name: str) -> tuple[int, Segment]:
        for i, seg in enumerate(self.segments):
            if seg.item.id == item_id:
                return i, seg
        raise NotFound(f"{field_name}: no item {item_id[:64]!r} in this session's conversation")

    def add(self, seg: Segment) -> str:
        """Appends (or inserts after item.previous_item_id) a segment; its previous id."""
        prev = seg.item.previous_item_id
        if prev:
            i, _ = self.find(prev, "create_item.previous_item_id")
            if i + 1 < len(self.segments):
                self.dirty |= self.segments[i + 1].in_context  # before the context's end: rebuild
            self.segments.insert(i + 1, seg)
            return prev
        last = self.segments[-1].item.id if self.segments else ""
        self.segments.append(seg)
        return last

    def delete(self, item_id: str) -> None:
        i, seg = self.find(item_id, "delete_item")
        self.dirty |= seg.in_context
        del self.segments[i]

    def turn(self, framing: ChatFraming, instructions: str, reserve: int) -> TurnInput:
        """The ids (and clips) a new response sends; reserve: tokens its answer may take."""
        if self.context_id and not self.dirty and instructions == self.instructions:
            pending = [s for s in self.segments if not s.in_context]
            last = next(s for s in reversed(self.segments) if s.in_context and s.answer_ids is not None)
            ids, clips = _render(framing, pending, last.answer_ids)
            if self.context_tokens + _estimate(ids, clips) + reserve <= self.max_tokens:
                return TurnInput(ids, clips, self.context_id, tuple(s.item.id for s in pending))
        dropped = []
        while True:
            ids, clips = _render(framing, self._with_system(instructions), None)
            if _estimate(ids, clips) + reserve <= self.max_tokens:
                return TurnInput(ids, clips, "", tuple(s.item.id for s in self.segments), tuple(dropped))
            first = _first_turn(self.segments)
            if first is None:
                raise InvalidArgument(f"create_response: the conversation's newest turn needs more than the session's "
                                      f"{self.max_tokens} context tokens")
            dropped += [s.item.id for s in self.segments[:first]]
            del self.segments[:first]

    def _with_system(self, instructions: str) -> list[Segment]:
        system = [Segment(Item("", "system", (instructions,)))] if instructions else []
        return system + self.segments

    def answered(self, sent: TurnInput, answer: Segment, prompt_tokens: int, context_id: str,
                 instructions: str) -> str:
        """The turn completed and its context is kept: the items it sent and its answer are
        in it. Returns the id of the context it replaces ("" for none)."""
        old, self.context_id = self.context_id, context_id
        held = set(sent.items) | {answer.item.id}
        for seg in self.segments:
            seg.in_context = seg.in_context and bool(sent.context_id) or seg.item.id in held
        answer.start = prompt_tokens
        self.context_tokens = prompt_tokens + len(answer.answer_ids or ())
        self.instructions, self.dirty = instructions, False
        return old

    def forget_context(self) -> str:
        """The context is gone (released, or the conversation rebuilt); its id."""
        old, self.context_id = self.context_id, ""
        for seg in self.segments:
            seg.in_context = False
        return old

    def truncate(self, item_id: str, audio_end_ms: int) -> tuple[int, int]:
        """Cuts an answer to the text its played frames covered: talker frame k (80 ms)
        speaks text id k, so audio_end_ms keeps ceil(ms / 80) ids. Returns (ids kept,
        context tokens kept: 0 when the context needs no cut or must be rebuilt)."""
        i, seg = self.find(item_id, "truncate_item.item_id")
        if seg.answer_ids is None:
            raise InvalidArgument(f"truncate_item.item_id: item {item_id[:64]!r} is not a model answer")
        keep = min(len(seg.answer_ids), math.ceil(audio_end_ms / FRAME_MS))
        if keep == len(seg.answer_ids):
            return keep, 0
        del seg.answer_ids[keep:]
        if not seg.in_context:
            return keep, 0
        if any(s.in_context for s in self.segments[i + 1:]) or keep == 0 and seg.start == 0:
            self.dirty = True
            return keep, 0
        self.context_tokens = seg.start + keep
        return keep, self.context_tokens


def _first_turn(segments: list[Segment]) -> int | None:
    """How many leading segments make the oldest turn (up to and with its first answer);
    None when no answer is left to drop before the newest input."""
    for i, seg in enumerate(segments):
        if seg.answer_ids is not None and i + 1 < len(segments):
            return i + 1
    return None


def _render(framing: ChatFraming, segments: list[Segment], after: list[int] | None) -> tuple[list[int], list[Clip]]:
    """Ids and clips of `segments` then the generation prompt; after: the ids of the answer
    the context ends with (None: the segments open the conversation)."""
    ids, clips, head = [], [], []
    if after is not None:
        ids += framing.closing(after)
    for seg in segments:
        if seg.answer_ids is not None and not seg.answer_ids:
            continue  # an answer cancelled before its first id says nothing
        msg = Message(seg.item.role, tuple(AUDIO if isinstance(p, Clip) else p for p in seg.item.parts))
        clips += [p for p in seg.item.parts if isinstance(p, Clip)]
        if after is None and seg.answer_ids is None and not ids:
            head.append(msg)  # the opening messages render as they stand
            continue
        if head:
            ids, head = framing.first(head), []
        if seg.answer_ids is not None:
            ids += framing.opening + seg.answer_ids + framing.closing(seg.answer_ids)
        else:
            ids += framing.message(msg)
    if head:
        ids = framing.first(head)
    return ids + framing.opening, clips


def _estimate(ids: list[int], clips: list[Clip]) -> int:
    seconds = sum(len(c.pcm) / 2 / c.sample_rate for c in clips)
    return len(ids) + math.ceil(seconds * AUDIO_TOKENS_PER_S)
