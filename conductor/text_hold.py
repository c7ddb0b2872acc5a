"""A voice stream's text deltas travel with its audio.

    hold = TextHold(max_held)          # 0: every batch goes as it comes
    for batch in the request's event batches:
        out = hold.batch(batch)        # what to send now; may be empty
        if out: send(out)
    send(hold.rest())                  # before the stream's last events

A client that asks for audio reads the text as captions of what it hears, so the text
need only keep ahead of the audio. The thinker makes text long before the speech of it
plays (a token per step, hundreds of milliseconds early), and each delta sent alone is
one more gRPC message the conductor writes and the client reads: in a burst of voice
streams those messages cost as much CPU as the talker's steps. So while text deltas
alone arrive, they wait; they go at the front of the next batch that carries anything
else (an audio chunk, the usage), or once `max_held` of them wait.

Contract: the concatenation of every returned batch and `rest()` is the concatenation of
the batches passed in, in order; a returned batch holds something other than text, or
at least `max_held` text events; fewer than `max_held` events wait between calls.
"""
from __future__ import annotations

from typing import Any, Callable

from protos.starmesh.v1 import conductor_pb2 as pb


def is_text(event: pb.GenerateEvent) -> bool:
    return event.WhichOneof("kind") == "text"


class TextHold:
    def __init__(self, max_held: int, is_text: Callable[[Any], bool] = is_text) -> None:
        """is_text: whether an event is a text delta (the events' form: GenerateEvent
        messages, or a session turn's plain data)."""
        if max_held < 0:
            raise ValueError(f"max_held must be >= 0, got {max_held}")
        self.max_held = max_held
        self.is_text = is_text
        self.held: list[pb.GenerateEvent] = []

    def batch(self, events: list[pb.GenerateEvent]) -> list[pb.GenerateEvent]:
        """The events to send now: `events` after those held, or nothing while only a
        few text deltas have come."""
        if self.max_held and all(self.is_text(e) for e in events):
            self.held += events
            if len(self.held) < self.max_held:
                return []
            events = []
        out, self.held = self.held + events, []
        return out

    def rest(self) -> list[pb.GenerateEvent]:
        """The text still held (the stream ends)."""
        out, self.held = self.held, []
        return out
