"""One session: a conversation with one model, kept in the mesh, driven by the client's
inputs (core.session_events) in order; events go out through `emit` as they happen.

The first input must be `configure` naming a served model that makes text (and audio
for AUDIO output) and has a chat template. A bad input is answered with a Failure naming
the field and its event_id; the session lives on. Responses run one at a time as tasks
(conductor.session_response); audio goes through the buffer and, with turn detection,
the speech detector (conductor.session_vad), off the event loop.

    session = Session(catalog, runner, context_op, limits, emit)
    await session.handle(Input("e1", "configure", Settings(model="omni")))
    ...
    await session.close()    # cancels a running response, releases the kept context
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import secrets
from dataclasses import dataclass
from typing import Callable

from conductor.session_audio import AudioBuffer
from conductor.session_conversation import Conversation, Segment
from conductor.session_framing import ChatFraming
from conductor.session_limits import SessionLimits
from conductor.session_response import ResponseRun
from conductor.session_turns import TurnRunner
from conductor.session_vad import SpeechDetector
from core.errors import InvalidArgument, StarmeshError
from core.session_events import (AUDIO, Cleared, Clip, Committed, Deleted, Failure, Input, Item, ItemEvent,
                                 ResponseRequest, SessionState, Settings, Speech, State, Truncate, Truncated)

ROLES = ("user", "assistant", "system")


@dataclass(frozen=True)
class SessionModel:
    """What a session needs to know of a served model."""
    name: str
    tokenizer: object | None
    makes_audio: bool
    voice_param: str = ""
    voices: tuple[str, ...] = ()


class Session:
    def __init__(self, catalog: Callable[[str], SessionModel | None], runner: TurnRunner,
                 context_op: Callable[[str, str, int], None], limits: SessionLimits, emit: Callable) -> None:
        """catalog(name): the served model or None; runner: runs a turn in the mesh;
        context_op(model, context_id, keep_tokens): releases (0) or cuts a kept context."""
        self.catalog, self.runner, self.context_op, self.limits, self.emit = catalog, runner, context_op, limits, emit
        self.id = "sess_" + secrets.token_hex(12)
        self.state: State | None = None
        self.model: SessionModel | None = None
        self.framing: ChatFraming | None = None
        self.conversation = Conversation(limits.max_context_tokens)
        self.audio: AudioBuffer | None = None
        self.vad: SpeechDetector | None = None
        self.response: ResponseRun | None = None
        self._ids = itertools.count(1)
        self._speech_item, self._speech_ms = "", 0  # the speech in progress: its user item, where it began

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self.id[5:13]}{next(self._ids):04d}"

    @property
    def is_busy(self) -> bool:
        return self.response is not None and not self.response.is_done

    async def handle(self, inp: Input) -> None:
        """Applies one input; a bad one becomes a Failure naming its field."""
        try:
            if inp.kind != "configure" and self.state is None:
                raise InvalidArgument("configure: the first input of a session must be configure")
            await getattr(self, "_" + inp.kind)(inp.value, inp.event_id)
        except StarmeshError as e:
            self.emit(failure(e, inp))

    # -- configure -------------------------------------------------------------------------
    async def _configure(self, s: Settings, event_id: str) -> None:
        created = self.state is None
        if created:
            self._bind_model(s.model)
        elif s.model and s.model != self.state.model:
            raise InvalidArgument(f"configure.model: a session's model cannot change (it is {self.state.model!r})")
        state = _merged(self.state or State(self.model.name), s)
        if AUDIO in state.output_modalities and not self.model.makes_audio:
            raise InvalidArgument(f"configure.output_modalities: model {self.model.name!r} makes no audio")
        if state.voice and state.voice not in self.model.voices:
            raise InvalidArgument(f"configure.voice {state.voice[:32]!r} is not one of {list(self.model.voices)}")
        if self.state is not None and state.input_sample_rate != self.state.input_sample_rate and self.audio.pcm:
            raise InvalidArgument("configure.input_sample_rate: commit or clear the appended audio first")
        vad = None
        if state.turn_detection is not None:  # a new detector (its settings) unless they stand as they were
            same = self.vad is not None and self.state.turn_detection == state.turn_detection \
                and self.state.input_sample_rate == state.input_sample_rate
            vad = self.vad if same else await asyncio.to_thread(SpeechDetector, state.turn_detection,
                                                                   state.input_sample_rate)
        self.state, self.vad = state, vad
        if self.audio is None or not self.audio.pcm:
            self.audio = AudioBuffer(state.input_sample_rate, self.limits.max_audio_s)
        self.emit(SessionState(self.id, state, created))

    def _bind_model(self, name: str) -> None:
        if not name:
            raise InvalidArgument("configure.model is empty (a name from ListModels)")
        model = self.catalog(name)
        if model is None:
            raise InvalidArgument(f"configure.model {name[:64]!r} is not served here")
        if model.tokenizer is None:
            raise InvalidArgument(f"configure.model {name!r} has no tokenizer on this conductor (a session "
                                  "renders its turns with the model's chat template)")
        self.framing, self.model = ChatFraming(model.tokenizer), model

    # -- audio -----------------------------------------------------------------------------
    async def _append_audio(self, data: bytes, event_id: str) -> None:
        self.audio.append(data)
        if self.vad is None:
            return
        for mark in await asyncio.to_thread(self.vad.feed, data):
            if mark.started:
                self._speech_item, self._speech_ms = self.new_id("item"), mark.audio_ms
                self.emit(Speech(True, mark.audio_ms, self._speech_item))
                if self.state.turn_detection.interrupt_response and self.is_busy:
                    await self.response.cancel("turn_detected")
            else:
                self.emit(Speech(False, mark.audio_ms, self._speech_item))
                await self._speech_stopped(mark.audio_ms, event_id)

    async def _speech_stopped(self, stop_ms: int, event_id: str) -> None:
        td = self.state.turn_detection
        pcm = self.audio.take(max(0, self._speech_ms - td.prefix_padding_ms), stop_ms)
        self._commit(pcm, self._speech_item)
        if td.create_response:
            await self._create_response(ResponseRequest(), event_id)

    async def _commit_audio(self, _, event_id: str) -> None:
        if not self.audio.pcm:
            raise InvalidArgument("commit_audio: no audio was appended since the last commit")
        if self.vad is not None:
            self.vad.reset()
        self._commit(self.audio.take(), self.new_id("item"))

    def _commit(self, pcm: bytes, item_id: str) -> None:
        item = Item(item_id, "user", (Clip(pcm, self.audio.sample_rate),))
        previous = self._add(Segment(item))
        self.emit(Committed(item_id, previous))
        self._added(dataclasses.replace(item, previous_item_id=previous))

    def _added(self, item: Item) -> None:
        self.emit(ItemEvent(item, False))
        self.emit(ItemEvent(item, True))

    async def _clear_audio(self, _, event_id: str) -> None:
        self.audio.clear()
        if self.vad is not None:
            self.vad.reset()
        self.emit(Cleared())

    # -- items -----------------------------------------------------------------------------
    def _add(self, seg: Segment) -> str:
        if len(self.conversation.segments) >= self.limits.max_items:
            raise InvalidArgument(f"create_item: the conversation holds {self.limits.max_items} items (max_items)")
        return self.conversation.add(seg)

    async def _create_item(self, item: Item, event_id: str) -> None:
        if item.role not in ROLES:
            raise InvalidArgument(f"create_item.role must be one of {list(ROLES)}, got {item.role[:32]!r}")
        if not item.parts:
            raise InvalidArgument("create_item.content is empty")
        if item.role != "user" and any(isinstance(p, Clip) for p in item.parts):
            raise InvalidArgument(f"create_item.content: only a user item takes audio, not a {item.role} one")
        item = dataclasses.replace(item, id=item.id or self.new_id("item"), status="completed")
        if any(s.item.id == item.id for s in self.conversation.segments):
            raise InvalidArgument(f"create_item.id {item.id[:64]!r} is in use")
        previous = self._add(Segment(item))
        self._added(dataclasses.replace(item, previous_item_id=previous))

    async def _delete_item(self, item_id: str, event_id: str) -> None:
        if self.is_busy and self.response.item_id == item_id:
            raise InvalidArgument("delete_item: that item's response is running (cancel it first)")
        self.conversation.delete(item_id)
        self.emit(Deleted(item_id))

    async def _truncate_item(self, t: Truncate, event_id: str) -> None:
        if self.is_busy and self.response.item_id == t.item_id:
            await self.response.cancel("truncated")
        _, keep_tokens = self.conversation.truncate(t.item_id, t.audio_end_ms)
        if keep_tokens:
            self.context_op(self.model.name, self.conversation.context_id, keep_tokens)
        self.emit(Truncated(t))

    # -- responses -------------------------------------------------------------------------
    async def _create_response(self, req: ResponseRequest, event_id: str) -> None:
        if self.is_busy:
            raise InvalidArgument(f"create_response: response {self.response.id!r} is running (one at a time)")
        self.response = ResponseRun(self, req, event_id)
        self.response.start()

    async def _cancel_response(self, response_id: str, event_id: str) -> None:
        if not self.is_busy or (response_id and response_id != self.response.id):
            raise InvalidArgument(f"cancel_response: no response {response_id[:64]!r} is running")
        await self.response.cancel("client_cancelled")

    def release(self, context_id: str) -> None:
        if context_id:
            self.context_op(self.model.name, context_id, 0)

    async def close(self) -> None:
        """The session ends: its running response is cancelled, its context released."""
        if self.is_busy:
            await self.response.cancel("session_closed")
        if self.model is not None:
            self.release(self.conversation.forget_context())


def _merged(state: State, s: Settings) -> State:
    changes = {}
    if s.instructions is not None:
        changes["instructions"] = s.instructions
    if s.output_modalities:
        changes["output_modalities"] = s.output_modalities
    if s.voice:
        changes["voice"] = s.voice
    if s.turn_detection is not None:
        changes["turn_detection"] = s.turn_detection
    if s.no_turn_detection:
        changes["turn_detection"] = None
    if s.input_sample_rate:
        if not 8000 <= s.input_sample_rate <= 192000:
            raise InvalidArgument(f"configure.input_sample_rate must be in 8000..192000, got {s.input_sample_rate}")
        changes["input_sample_rate"] = s.input_sample_rate
    if s.params:
        changes["params"] = {**state.params, **s.params}
    return dataclasses.replace(state, **changes)


def failure(e: StarmeshError, inp: Input) -> Failure:
    """A bad input's error event: its field is the message's first word (errors name it)."""
    message = str(e)
    head = message.split(" ", 1)[0].rstrip(":")
    param = head if head.split(".")[0].split("[")[0] in _FIELDS else inp.kind
    return Failure(e.status, message, param, inp.event_id)


_FIELDS = ("configure", "append_audio", "commit_audio", "clear_audio", "create_item", "truncate_item",
           "delete_item", "create_response", "cancel_response")
