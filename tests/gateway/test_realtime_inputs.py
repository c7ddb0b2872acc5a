"""Realtime client events as the conductor reads them: the gateway's translation
(gateway.realtime_input, plain data) through the client's edge and the conductor's
(client.session_proto, conductor.session_proto), no server in between. An
`input_audio` part arrives as the PCM16 it carried, at the session's 24 kHz."""
from __future__ import annotations

import base64
import json

import numpy as np

from client.model_card import cards_from_proto
from client.session_proto import input_to_proto
from conductor.session_proto import input_from_proto
from core.session_events import Clip, Input, TurnDetection
from gateway.realtime_input import ClientEvents
from gateway.realtime_session_config import first_config
from tests.gateway.scripted_sessions import _card

CARD = cards_from_proto(_card())["omni"]
PCM = (np.sin(np.arange(2400) / 9.0) * 8000).astype("<i2").tobytes()


def _conductor_reads(event: dict):
    return input_from_proto(input_to_proto(ClientEvents(CARD).translate(json.dumps(event))), 24000)


def test_an_input_audio_part_reaches_the_conductor_as_its_pcm():
    inp = _conductor_reads({"type": "conversation.item.create", "event_id": "ev_1", "item": {
        "type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "listen"}, {"type": "input_audio", "audio": base64.b64encode(PCM).decode()}]}})
    assert (inp.event_id, inp.kind) == ("ev_1", "create_item")
    assert inp.value.role == "user" and inp.value.parts == ("listen", Clip(PCM, 24000))


def test_a_session_update_reaches_the_conductor_as_the_settings_it_names():
    inp = _conductor_reads({"type": "session.update", "session": {
        "type": "realtime", "instructions": "be brief", "output_modalities": ["text"], "max_output_tokens": 8,
        "max_frames": 10, "audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 700}},
                                    "output": {"voice": "chelsie"}}}})
    s = inp.value
    assert (s.instructions, s.output_modalities, s.voice, s.input_sample_rate) == ("be brief", ("text",), "chelsie",
                                                                                  24000)
    assert s.turn_detection == TurnDetection(silence_duration_ms=700, create_response=True, interrupt_response=True)
    assert dict(s.params) == {"max_new_tokens": 8, "max_frames": 10} and not s.no_turn_detection


def test_the_first_configure_is_openais_defaults():
    s = input_from_proto(input_to_proto(Input("", "configure", first_config(CARD))), 24000).value
    assert (s.model, s.output_modalities, s.input_sample_rate) == ("omni", ("audio",), 24000)
    assert s.turn_detection == TurnDetection(create_response=True, interrupt_response=True)
