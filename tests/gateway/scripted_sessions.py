"""A real grpc.aio server speaking the conductor's `Sessions.Session` (and `ListModels`)
with scripted replies, and a real gateway (uvicorn, in a thread) in front of it: for the
gateway's Realtime translation tests alone, which check what each client event becomes
on the wire and what each SessionEvent becomes for the client. The model itself is
tested through the real conductor (test_realtime_mesh.py).

Script: configure -> SessionState (created the first time); commit_audio -> a committed
user item holding the appended bytes; create_item -> item_added; create_response -> a
response of two transcript deltas and two audio chunks (float32 at 24 kHz), then
response_done with usage; instructions "forever" make it stream audio until cancelled
(the stalled-client test); cancel_response -> response_done "cancelled".
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc
import numpy as np

from protos.starmesh.v1 import conductor_pb2 as cpb
from protos.starmesh.v1 import session_pb2 as pb

KEY = "realtime-test-key"
CHUNK = (0.25 * np.sin(np.arange(1920) / 7.0)).astype("<f4")   # 80 ms at 24 kHz
WORDS = ("Hi", " there")


@dataclass
class Record:
    """What the scripted conductor saw: every input, and how many sessions ended while a
    "forever" response streamed (cancelled: by the gateway, as no client ends one)."""
    inputs: list = field(default_factory=list)
    cancelled: int = 0
    ended: threading.Condition = field(default_factory=threading.Condition)

    def wait_cancelled(self, count: int, timeout_s: float = 60.0) -> bool:
        with self.ended:
            return self.ended.wait_for(lambda: self.cancelled >= count, timeout_s)


def _card() -> cpb.ListModelsResponse:
    m = cpb.ModelInfo(name="omni", accepts_text=True, voices=["ethan", "chelsie"], voice_param="speaker",
                      sample_rate=24000, output_modalities=[cpb.MODALITY_TEXT, cpb.MODALITY_AUDIO])
    m.params.add(name="max_new_tokens", type="int", min=1, max=4096)
    m.params.add(name="max_frames", type="int", min=1, max=100000)
    return cpb.ListModelsResponse(models=[m])


class _Script:
    def __init__(self, record: Record) -> None:
        self.record, self.audio, self.n = record, bytearray(), 0
        self.forever: asyncio.Task | None = None

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    async def reply(self, m: pb.SessionInput, out: asyncio.Queue) -> None:
        kind = m.WhichOneof("kind")
        if kind == "configure":
            state = pb.SessionState(session_id="sess_1", created=self.n == 0, config=m.configure)
            self.n += 1
            await out.put(pb.SessionEvent(session=state))
        elif kind == "append_audio":
            self.audio += m.append_audio
        elif kind == "commit_audio":
            item = pb.SessionItem(id=self._id("item"), role="user", status="completed")
            part = item.content.add()
            part.audio.data, part.audio.mime_type = bytes(self.audio), "audio/pcm"
            self.audio.clear()
            await out.put(pb.SessionEvent(audio_committed=pb.ItemMark(item_id=item.id)))
            await out.put(pb.SessionEvent(item_added=item))
        elif kind == "create_item":
            item = pb.SessionItem()
            item.CopyFrom(m.create_item)
            item.id = item.id or self._id("item")
            await out.put(pb.SessionEvent(item_added=item))
        elif kind == "create_response":
            await self._respond(m.create_response, out)
        elif kind == "cancel_response" and self.forever is not None:
            self.forever.cancel()
        elif kind == "delete_item" and m.delete_item == "missing":
            error = pb.SessionError(code="INVALID_ARGUMENT", message="delete_item 'missing' is no item of this session",
                                    param="delete_item", event_id=m.event_id)
            await out.put(pb.SessionEvent(error=error))
        elif kind == "delete_item":
            await out.put(pb.SessionEvent(item_deleted=m.delete_item))

    async def _respond(self, create: pb.ResponseCreate, out: asyncio.Queue) -> None:
        rid, item = self._id("resp"), self._id("item")
        await out.put(pb.SessionEvent(response_created=pb.ResponseMark(response_id=rid, item_id=item)))
        if create.instructions == "forever":
            self.forever = asyncio.create_task(self._forever(rid, item, out))
            return
        for word in WORDS:
            await out.put(pb.SessionEvent(output=pb.ResponseOutput(response_id=rid, item_id=item,
                                                                  transcript=cpb.TextDelta(text=word))))
            await out.put(pb.SessionEvent(output=pb.ResponseOutput(response_id=rid, item_id=item, audio=_audio())))
        usage = cpb.Usage(prompt_tokens=12, completion_tokens=3, cached_prompt_tokens=5)
        await out.put(pb.SessionEvent(response_done=pb.ResponseDone(response_id=rid, status="completed", usage=usage)))

    async def _forever(self, rid: str, item: str, out: asyncio.Queue) -> None:
        try:
            while True:
                await out.put(pb.SessionEvent(output=pb.ResponseOutput(response_id=rid, item_id=item, audio=_audio())))
        except asyncio.CancelledError:   # a full queue (nobody reads: the stream is over) drops it
            with contextlib.suppress(asyncio.QueueFull):
                out.put_nowait(pb.SessionEvent(response_done=pb.ResponseDone(response_id=rid, status="cancelled",
                                                                             reason="client_cancelled")))


def _audio() -> cpb.AudioChunk:
    return cpb.AudioChunk(samples=CHUNK.tobytes(), sample_rate=24000, format=cpb.AUDIO_FORMAT_PCM_F32LE,
                          num_samples=len(CHUNK))


async def _session(requests, context, record: Record):
    if dict(context.invocation_metadata()).get("authorization") != f"Bearer {KEY}":
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authorization metadata: wrong api key")
    script, out = _Script(record), asyncio.Queue(maxsize=64)

    async def feed():
        async for m in requests:
            record.inputs.append(m)
            await script.reply(m, out)
        await out.put(None)

    feeder = asyncio.create_task(feed())
    try:
        while (event := await out.get()) is not None:
            yield event
    finally:
        feeder.cancel()
        if script.forever is not None:
            script.forever.cancel()
        if script.forever is not None:   # a response streaming until its session ends
            with record.ended:
                record.cancelled += 1
                record.ended.notify_all()


def _server(record: Record) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()

    async def session(requests, context):   # grpc.aio serves async generator functions as streams
        async for event in _session(requests, context, record):
            yield event

    handlers = {"Session": grpc.stream_stream_rpc_method_handler(
        session, request_deserializer=pb.SessionInput.FromString, response_serializer=pb.SessionEvent.SerializeToString)}
    models = {"ListModels": grpc.unary_unary_rpc_method_handler(
        _list_models, request_deserializer=cpb.ListModelsRequest.FromString,
        response_serializer=cpb.ListModelsResponse.SerializeToString)}
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("starmesh.v1.Sessions", handlers),
                                     grpc.method_handlers_generic_handler("starmesh.v1.Conductor", models)])
    return server, server.add_insecure_port("127.0.0.1:0")


async def _list_models(request, context):
    if dict(context.invocation_metadata()).get("authorization") != f"Bearer {KEY}":
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authorization metadata: wrong api key")
    return _card()


@contextmanager
def scripted_gateway(config=None):
    """(http://HOST:PORT of a real gateway, the scripted conductor's Record). Both serve
    from one event loop in one thread (grpc.aio keeps to one loop at a time here)."""
    import uvicorn

    from client.connection import Connection
    from gateway.app import make_app
    from gateway.config import GatewayConfig
    from gateway.server import bind, uvicorn_config

    config, record, loop = config or GatewayConfig(port=0), Record(), asyncio.new_event_loop()
    sock = bind("127.0.0.1", 0)
    ready, stop = threading.Event(), threading.Event()
    holder = {}

    async def serve():
        grpc_server, port = _server(record)
        await grpc_server.start()
        web = uvicorn.Server(uvicorn_config(make_app(Connection(f"127.0.0.1:{port}"), config), config))
        task = asyncio.create_task(web.serve(sockets=[sock]))
        while not web.started and not task.done():
            await asyncio.sleep(0.02)   # uvicorn has no started event
        holder["web"] = web
        ready.set()
        await task
        await grpc_server.stop(0)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(60) and "web" in holder, "the scripted gateway did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", record
    finally:
        holder["web"].should_exit = True
        thread.join(60)
        assert not thread.is_alive(), "the scripted gateway did not stop"
        loop.close()
        sock.close()
