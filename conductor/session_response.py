"""One response of a session: the turn that continues its conversation's kept context
with what is new (conductor.session_conversation), run in the mesh as a task, its text
and audio sent as events, its answer kept as generated ids.

Completed and kept: the context now holds the turn and its answer; the context it
continued is released (ContextOp) once the new one exists. Cancelled or failed: the
engine keeps nothing of an aborted sequence, so the turn's items and the ids of the
answer that were sent stay in the conversation as not yet in the context: the next turn
sends them again (as the same ids).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from conductor.session_conversation import Segment
from conductor.session_turns import Turn, TurnAudio, TurnRaw, TurnText
from core.errors import StarmeshError
from core.session_events import (AUDIO, AudioOut, Failure, Item, ItemEvent, RawOut, ResponseCreated, ResponseDone,
                                 ResponseRequest, TextOut, Usage)

if TYPE_CHECKING:
    from conductor.session_core import Session

log = logging.getLogger(__name__)


class ResponseRun:
    def __init__(self, session: "Session", req: ResponseRequest, event_id: str) -> None:
        self.session, self.req, self.event_id = session, req, event_id
        self.id = session.new_id("resp")
        self.item_id = session.new_id("item")
        self.modalities = req.output_modalities or session.state.output_modalities
        self.instructions = req.instructions or session.state.instructions
        self.answer = Segment(Item(self.item_id, "assistant", (), "in_progress"), answer_ids=[])
        self.text: list[str] = []
        self.usage = Usage()
        self.is_done = False
        self._reason = ""
        self._task: asyncio.Task | None = None
        self.turn: Turn | None = None

    def start(self) -> None:
        s = self.session
        params = {**s.state.params, **self.req.params}
        reserve = int(params.get("max_new_tokens") or s.limits.default_answer_tokens)
        sent = s.conversation.turn(s.framing, self.instructions, reserve)  # InvalidArgument: nothing starts
        if sent.dropped:
            s.release(s.conversation.forget_context())
        previous = s.conversation.add(self.answer)
        s.emit(ResponseCreated(self.id, self.item_id))
        s.emit(ItemEvent(dataclasses.replace(self.answer.item, previous_item_id=previous), False))
        self._task = asyncio.get_running_loop().create_task(self._run(sent, params))

    async def cancel(self, reason: str) -> None:
        """Stops the response (its request is cancelled in the mesh) and waits for its end."""
        if self._task is None or self.is_done:
            return
        self._reason = reason
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            if not self._task.cancelled():  # the caller itself is cancelled, not the response
                raise

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    def _turn(self, sent, params: dict) -> Turn:
        s = self.session
        params = {**params, "keep_context": True}
        if sent.context_id:
            params["context_id"] = sent.context_id
        if s.state.voice and s.model.voice_param:
            params[s.model.voice_param] = s.state.voice
        wanted = ("text", "audio") if AUDIO in self.modalities else ("text",)
        self.turn = Turn(s.model.name, tuple(sent.ids), tuple(sent.clips), params, wanted, self.id,
                         self.req.raw_outputs)
        return self.turn

    async def _run(self, sent, params: dict) -> None:
        status, reason = "failed", ""
        try:
            events = self.session.runner(self._turn(sent, params))
            try:
                async for ev in events:
                    self._on(ev)
            finally:
                await events.aclose()
            status = "completed"
        except asyncio.CancelledError:
            status, reason = "cancelled", self._reason or "cancelled"
        except StarmeshError as e:
            reason = str(e)
            self.session.emit(Failure(e.status, reason, "create_response", self.event_id))
        except Exception as e:  # noqa: BLE001 - the session outlives one failed turn
            log.exception("session %s: response %s failed", self.session.id, self.id)
            reason = f"{type(e).__name__}: {e}"
        self._end(sent, status, reason)

    def _on(self, ev) -> None:
        s, audio = self.session, AUDIO in self.modalities
        if isinstance(ev, TurnText):
            self.answer.answer_ids.extend(ev.token_ids)
            self.text.append(ev.text)
            s.emit(TextOut(self.id, self.item_id, ev.token_ids, ev.text, transcript=audio))
        elif isinstance(ev, TurnAudio):
            s.emit(AudioOut(self.id, self.item_id, ev.samples, ev.sample_rate, ev.sequence_number, ev.num_samples))
        elif isinstance(ev, TurnRaw):
            s.emit(RawOut(self.id, self.item_id, ev.value))
        elif isinstance(ev, Usage):
            self.usage = ev

    def _end(self, sent, status: str, reason: str) -> None:
        s = self.session
        self.is_done = True
        item = dataclasses.replace(self.answer.item, parts=("".join(self.text),),
                                   status="completed" if status == "completed" else "incomplete")
        self.answer.item = item
        if status == "completed" and self.usage.context_id:
            prompt = self.usage.prompt_tokens
            s.release(s.conversation.answered(sent, self.answer, prompt, self.usage.context_id, self.instructions))
        elif self.turn is not None:  # its thinker may have finished (and kept it) before the cancel
            s.release(self.turn.report.get("keeping", ""))
        s.emit(ItemEvent(item, True))
        s.emit(ResponseDone(self.id, status, self.usage, item, reason))
