"""A conversation with a model over the conductor's `Sessions.Session` stream: the
conversation is kept in the mesh (the model's KV cache), so each turn sends only what is
new. Opened from a ConductorSession:

    async with ConductorSession("127.0.0.1:50050") as s:
        async with s.conversation("omni", output_modalities=("audio",)) as conv:
            await conv.say("Hi")                   # a user item
            answer = await conv.respond()          # text ids, text, audio samples, usage
            await conv.append_audio(pcm16)         # PCM16 mono at input_sample_rate
            await conv.commit_audio()
            answer = await conv.respond()

Events come as starmesh.v1.SessionEvent messages (ConductorSession.session_stream gives
the same stream in plain data); `respond` gathers one response's into an `Answer`. An
`error` event answering an input raises SessionError (a CallFailed whose `param` names
the field) from the call that waits for it; leaving the block ends the session, and the
conductor releases what it kept.
"""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping

from client.call_failed import CallFailed, call_failed


@dataclass
class Answer:
    """One response: its text ids and text (the transcript, for audio), its audio
    (float32 samples), and how it ended."""
    response_id: str
    item_id: str
    status: str = ""
    reason: str = ""
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    audio: list[bytes] = field(default_factory=list)   # float32 little-endian chunks
    sample_rate: int = 0
    usage: Any = None                                   # starmesh.v1.Usage
    raw: dict = field(default_factory=dict)             # raw output name -> [numpy arrays], in order
    events: list = field(default_factory=list)          # every event of the response, in order

    def samples(self):
        import numpy as np

        return np.frombuffer(b"".join(self.audio), dtype="<f4")


class Conversation:
    def __init__(self, channel, metadata: tuple, config) -> None:
        self.channel, self.metadata, self.config = channel, metadata, config
        self.session_id = ""
        self.pending: list = []  # events read but not taken yet
        self._ids = itertools.count(1)
        self._call = None

    async def __aenter__(self) -> "Conversation":
        from protos.starmesh.v1 import session_pb2_grpc

        self._call = session_pb2_grpc.SessionsStub(self.channel).Session(metadata=self.metadata)
        # the conductor's headers (or its refusal: a bad key, too many sessions) before the
        # first write; a status that meets a write in flight can arrive as INTERNAL instead
        await self._call.initial_metadata()
        event_id = await self.send(configure=self.config)
        ev = await self.next(lambda e: e.WhichOneof("kind") == "session", event_id)
        self.session_id = ev.session.session_id
        return self

    async def __aexit__(self, *exc) -> None:
        if exc[0] is not None:
            self._call.cancel()
            return
        try:
            await self._call.done_writing()
            while await self._call.read() is not _eof():  # what the session still sends before it ends
                pass
        except Exception:  # noqa: BLE001 - the session is over either way
            self._call.cancel()

    async def send(self, **kind) -> str:
        """Sends one SessionInput of `kind` (its oneof field = value); its event_id. A
        session that has ended takes nothing: the next read says why."""
        import grpc

        from protos.starmesh.v1 import session_pb2 as pb

        event_id = f"c{next(self._ids)}"
        try:
            await self._call.write(pb.SessionInput(event_id=event_id, **kind))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass
        return event_id

    async def next(self, match=lambda e: True, event_id: str = "", timeout_s: float | None = 120.0):
        """The next event `match` takes (events before it stay pending); an error event
        answering `event_id` raises CallFailed."""
        for i, ev in enumerate(self.pending):
            _raise_for(ev, event_id)
            if match(ev):
                return self.pending.pop(i)
        while True:
            ev = await asyncio.wait_for(self._read(), timeout_s)
            _raise_for(ev, event_id)
            if match(ev):
                return ev
            self.pending.append(ev)

    async def _read(self):
        import grpc

        try:
            ev = await self._call.read()
        except grpc.aio.AioRpcError as e:
            raise call_failed(e) from None
        if ev is _eof():
            code = await self._call.code()
            details = await self._call.details()
            raise CallFailed(code.name, details or "the session ended")
        return ev

    def take(self, match) -> list:
        """The pending events `match` takes, in order (they leave the pending list)."""
        out = [e for e in self.pending if match(e)]
        self.pending = [e for e in self.pending if not match(e)]
        return out

    # -- inputs ------------------------------------------------------------------------------
    async def say(self, text: str, role: str = "user") -> str:
        """A text item; its id once the conductor added it."""
        from protos.starmesh.v1 import conductor_pb2 as cpb
        from protos.starmesh.v1 import session_pb2 as pb

        event_id = await self.send(create_item=pb.SessionItem(role=role, content=[cpb.ContentPart(text=text)]))
        ev = await self.next(lambda e: e.WhichOneof("kind") == "item_done", event_id)
        return ev.item_done.id

    async def append_audio(self, pcm16: bytes) -> str:
        return await self.send(append_audio=bytes(pcm16))

    async def commit_audio(self) -> str:
        """Commits the appended audio as a user item; its id."""
        event_id = await self.send(commit_audio=True)
        ev = await self.next(lambda e: e.WhichOneof("kind") == "audio_committed", event_id)
        return ev.audio_committed.item_id

    async def respond(self, output_modalities: tuple[str, ...] = (), params: Mapping[str, Any] | None = None,
                      instructions: str = "", raw_outputs: tuple[str, ...] = (), timeout_s: float = 300.0) -> Answer:
        """Asks for a response and gathers its events until it is done."""
        answer = await self.start_response(output_modalities, params, instructions, raw_outputs)
        return await self.finish(answer, timeout_s)

    async def start_response(self, output_modalities: tuple[str, ...] = (), params: Mapping[str, Any] | None = None,
                             instructions: str = "", raw_outputs: tuple[str, ...] = ()) -> Answer:
        """raw_outputs: walk outputs also sent as tensors (Answer.raw), e.g. ("codes",)."""
        from client.session_proto import modality_number
        from protos.starmesh.v1 import session_pb2 as pb

        req = pb.ResponseCreate(output_modalities=[modality_number(m) for m in output_modalities],
                                instructions=instructions, raw_outputs=list(raw_outputs))
        if params:
            req.params.update(dict(params))
        event_id = await self.send(create_response=req)
        ev = await self.next(lambda e: e.WhichOneof("kind") == "response_created", event_id)
        return Answer(ev.response_created.response_id, ev.response_created.item_id)

    async def finish(self, answer: Answer, timeout_s: float = 300.0, until=None) -> Answer:
        """Reads `answer`'s events until it is done (or until `until(event)` is true)."""
        def mine(e) -> bool:
            kind = e.WhichOneof("kind")
            return (kind == "output" and e.output.response_id == answer.response_id
                    or kind == "response_done" and e.response_done.response_id == answer.response_id)

        while True:
            ev = await self.next(mine, timeout_s=timeout_s)
            answer.events.append(ev)
            if ev.WhichOneof("kind") == "response_done":
                done = ev.response_done
                answer.status, answer.reason, answer.usage = done.status, done.reason, done.usage
                return answer
            _add_output(answer, ev.output)
            if until is not None and until(ev):
                return answer

    async def cancel(self, response_id: str = "") -> str:
        return await self.send(cancel_response=response_id)

    async def truncate(self, item_id: str, audio_end_ms: int) -> None:
        from protos.starmesh.v1 import session_pb2 as pb

        event_id = await self.send(truncate_item=pb.ItemTruncate(item_id=item_id, audio_end_ms=audio_end_ms))
        await self.next(lambda e: e.WhichOneof("kind") == "item_truncated", event_id)


def _eof():
    import grpc

    return grpc.aio.EOF


def _add_output(answer: Answer, out) -> None:
    part = out.WhichOneof("part")
    if part in ("text", "transcript"):
        delta = getattr(out, part)
        answer.token_ids += list(delta.token_ids)
        answer.text += delta.text
    elif part == "audio":
        answer.audio.append(out.audio.samples)
        answer.sample_rate = out.audio.sample_rate
    elif part == "raw":
        from client.tensors import array_of

        answer.raw.setdefault(out.raw.name, []).append(array_of(out.raw))


def _raise_for(ev, event_id: str) -> None:
    if ev.WhichOneof("kind") == "error" and event_id and ev.error.event_id == event_id:
        raise SessionError(ev.error.code, ev.error.message, ev.error.param)


class SessionError(CallFailed):
    """An input the session refused (it lives on): param names the field."""

    def __init__(self, code: str, message: str, param: str) -> None:
        super().__init__(code, message)
        self.param = param
