"""The gRPC edge of a session's turns: a conductor.session_turns.Turn as the
starmesh.v1.GenerateRequest it is (input_ids, and the clips as the `media` and
`media_parts` inputs the media walk takes), run by the conductor's own Generate path
(ConductorServicer._batches: intake, admission, metering, kept contexts, the owner from
the session stream's metadata), its GenerateEvents read back as plain data.
"""
from __future__ import annotations

from typing import AsyncIterator

from conductor.session_events import Usage
from conductor.session_turns import Turn, TurnAudio, TurnRaw, TurnText, wav_bytes
from core.media_kinds import media_manifest
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
        batches = servicer._batches(turn_request(turn), caller, report=turn.report)
        try:
            async for batch in batches:
                for event in batch:
                    converted = _event(event)
                    if converted is not None:
                        yield converted
        finally:
            await batches.aclose()

    return run


def _event(ev: pb.GenerateEvent):
    kind = ev.WhichOneof("kind")
    if kind == "text":
        return TurnText(tuple(ev.text.token_ids), ev.text.text)
    if kind == "audio":
        a = ev.audio
        return TurnAudio(a.samples, a.sample_rate, a.sequence_number, a.num_samples)
    if kind == "tensor":
        return TurnRaw(ev.tensor)
    if kind == "usage":
        u = ev.usage
        return Usage(u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens, u.audio_seconds,
                     u.time_to_first_audio_ms, u.context_id)
    return None
