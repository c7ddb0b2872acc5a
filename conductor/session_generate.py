"""The gRPC edge of a session's turns: a conductor.session_turns.Turn as the
starmesh.v1.GenerateRequest it is (input_ids, and the clips as the `media` and
`media_parts` inputs the media walk takes), run by the conductor's own Generate path
(ConductorServicer._batches: intake, admission, metering, kept contexts, the owner from
the session stream's metadata), its events made as plain data (TurnEvents: the form
of conductor.client_events.RequestEvents that builds no GenerateEvent message).
"""
from __future__ import annotations

from typing import AsyncIterator

from conductor.client_outputs import ClientOutputs
from conductor.session_turns import Turn, TurnAudio, TurnRaw, TurnText, wav_bytes
from core.errors import StarmeshError
from core.media_kinds import media_manifest
from core.session_events import Usage
from protos.starmesh.v1 import conductor_pb2 as pb

MODALITIES = {"text": pb.MODALITY_TEXT, "audio": pb.MODALITY_AUDIO}


class _Caller:
    """What _batches reads of a call: the session stream's metadata (API key, end user)."""

    def __init__(self, metadata) -> None:
        self._metadata = tuple(metadata or ())

    def invocation_metadata(self):
        return self._metadata


def turn_request(turn: Turn) -> pb.GenerateRequest:
    import torch

    from transport.codec import inline_ref
    from transport.ref_proto import ref_to_proto

    req = pb.GenerateRequest(model=turn.model, request_id=turn.request_id, input_ids=list(turn.input_ids),
                             output_modalities=[MODALITIES[m] for m in turn.output_modalities],
                             raw_outputs=list(turn.raw_outputs))
    if turn.clips:
        files = [wav_bytes(c) for c in turn.clips]
        media = torch.frombuffer(bytearray(b"".join(files)), dtype=torch.uint8)
        parts = torch.tensor(media_manifest([("audio", f) for f in files]), dtype=torch.int64)
        ref_to_proto(inline_ref(media), req.inputs.add(name="media").tensor)
        ref_to_proto(inline_ref(parts), req.inputs.add(name="media_parts").tensor)
    req.params.update(dict(turn.params))
    return req


def turn_runner(servicer, metadata):
    """A TurnRunner over `servicer` (a ConductorServicer) for calls carrying `metadata`."""
    caller = _Caller(metadata)

    async def run(turn: Turn) -> AsyncIterator:
        batches = servicer._batches(turn_request(turn), caller, report=turn.report, form=TurnEvents)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()

    return run


class TurnEvents:
    """A turn's events as RequestEvents makes them (its form: GenerateEvents' methods), in
    plain data. A turn asks for text and audio (and raw outputs by name), so neither an
    image nor a progress event is ever made here."""

    @staticmethod
    def text(request_id: str, ids: list[int], text: str) -> TurnText:
        return TurnText(tuple(ids), text)

    @staticmethod
    def audio(request_id: str, samples: bytes, sample_rate: int, sequence_number: int, num_samples: int) -> TurnAudio:
        return TurnAudio(samples, sample_rate, sequence_number, num_samples)

    @staticmethod
    def image(request_id: str, *_) -> None:
        raise StarmeshError("a session turn makes no image or progress events (its modalities are text and audio)")

    step = image

    @staticmethod
    def tensor(outputs: ClientOutputs, request_id: str, name: str, value) -> TurnRaw:
        # the message the session stream carries it in (ResponseOutput.raw), built once
        return TurnRaw(outputs.event(request_id, name, value).tensor)

    @staticmethod
    def usage(request_id: str, counts: dict, metrics: dict) -> Usage:
        return Usage(counts["prompt_tokens"], counts["cached_prompt_tokens"], counts["completion_tokens"],
                     counts["audio_seconds"], counts["time_to_first_audio_ms"], counts["context_id"])

    @staticmethod
    def is_text(event) -> bool:
        return isinstance(event, TurnText)
