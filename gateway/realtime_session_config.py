"""A Realtime session object (GA shape) to and from a session's settings
(core.session_events: Settings in, SessionState out).

    settings = session_config(update["session"], card)       # session.update -> Settings
    session_json(state, card)                                # SessionState -> session.created/updated's session

Audio is 16-bit PCM at 24 kHz both ways (`{"type": "audio/pcm", "rate": 24000}`, what
OpenAI's GA protocol takes); the model's request params are any other key of the session
(`max_frames`, `talker_temperature`, ...), checked against the model's card like the HTTP
routes' extension fields; `max_output_tokens` is the model's `max_new_tokens`.
OpenAI fields with nothing to do here (tools, tracing, ...) are taken at their neutral
value and refused otherwise, naming them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from client.model_card import ModelCard
from core.session_events import SessionState, Settings, TurnDetection
from gateway.api_error import bad_field
from gateway.extensions import request_params
from gateway.realtime_fields import get, one_of

RATE = 24000                       # Hz of the PCM both ways
PCM = {"type": "audio/pcm", "rate": RATE}
# OpenAI session fields this gateway has nothing for: accepted at these values only
NEUTRAL = {"tools": ([], None), "tool_choice": ("auto", "none", None), "tracing": ("auto", None),
           "include": ([], None), "truncation": ("auto", None), "prompt": (None,), "reasoning": (None,),
           "parallel_tool_calls": (True, False, None)}
OPENAI_KEYS = {"type", "model", "instructions", "output_modalities", "audio", "max_output_tokens", "id", "object",
               "expires_at", *NEUTRAL}


def session_config(session: Any, card: ModelCard, path: str = "session") -> Settings:
    """A session.update's `session` as a configure's Settings (only what it sets)."""
    if not isinstance(session, dict):
        raise bad_field(path, f"{path} must be an object")
    one_of(session, "type", ("realtime",), f"{path}.type")
    model = get(session, "model", str, f"{path}.model")
    if model is not None and model != card.name:
        raise bad_field(f"{path}.model", f"{path}.model: the session's model is {card.name!r}; it cannot change")
    for key, allowed in NEUTRAL.items():
        if session.get(key) not in allowed:
            raise bad_field(f"{path}.{key}", f"{path}.{key} is not supported here (only {list(allowed)})")
    instructions = get(session, "instructions", str, f"{path}.instructions")
    settings = Settings(instructions=instructions or None,   # "" leaves them as they are, as in a configure
                        output_modalities=output_modalities(session, card, path),
                        **_audio(session.get("audio"), card, f"{path}.audio"))
    extensions = {k: v for k, v in session.items() if k not in OPENAI_KEYS}
    mapped = {"max_new_tokens": max_output_tokens(session, f"{path}.max_output_tokens")}
    params = request_params(card, extensions, mapped, {"max_new_tokens": f"{path}.max_output_tokens"})
    return dataclasses.replace(settings, params=params) if params else settings


def output_modalities(obj: Mapping[str, Any], card: ModelCard, path: str) -> tuple[str, ...]:
    """`output_modalities` (["audio"] or ["text"]), checked; () when absent."""
    names = get(obj, "output_modalities", list, f"{path}.output_modalities", default=[])
    if len(names) > 1:
        raise bad_field(f"{path}.output_modalities", f"{path}.output_modalities: one of 'audio' or 'text', not both")
    for i, name in enumerate(names):
        if name not in ("text", "audio") or not card.makes(name):
            raise bad_field(f"{path}.output_modalities[{i}]", f"{path}.output_modalities[{i}] {name!r}: model "
                                                              f"{card.name!r} makes {list(card.output_modalities)}"[:300])
    return tuple(names)


def max_output_tokens(obj: Mapping[str, Any], path: str) -> int | None:
    value = obj.get("max_output_tokens")
    if value is None or value == "inf":
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 4096:
        raise bad_field(path, f"{path} must be an integer in [1, 4096] or 'inf', got {value!r}"[:200])
    return value


def _audio(audio: Any, card: ModelCard, path: str) -> dict:
    """The Settings fields of a session's `audio` object."""
    if audio is None:
        return {}
    if not isinstance(audio, dict):
        raise bad_field(path, f"{path} must be an object")
    inp = get(audio, "input", dict, f"{path}.input", default={})
    out = get(audio, "output", dict, f"{path}.output", default={})
    for side, where in ((inp, f"{path}.input"), (out, f"{path}.output")):
        fmt = get(side, "format", dict, f"{where}.format")
        if fmt is not None:
            one_of(fmt, "type", ("audio/pcm",), f"{where}.format.type")
            rate = get(fmt, "rate", int, f"{where}.format.rate", default=RATE)
            if rate != RATE:
                raise bad_field(f"{where}.format.rate", f"{where}.format.rate must be {RATE}, got {rate}")
    for key, allowed in (("noise_reduction", (None,)), ("transcription", (None,))):
        if inp.get(key) not in allowed:
            raise bad_field(f"{path}.input.{key}", f"{path}.input.{key} is not supported here (only null)")
    if get(out, "speed", float, f"{path}.output.speed", default=1.0) != 1.0:
        raise bad_field(f"{path}.output.speed", f"{path}.output.speed: 1.0 only")
    voice = get(out, "voice", str, f"{path}.output.voice")
    if voice is not None:
        if voice not in card.voices:
            raise bad_field(f"{path}.output.voice", f"{path}.output.voice {voice!r} is not a voice of model "
                                                    f"{card.name!r} (voices: {list(card.voices)})"[:300])
    fields = {"voice": voice or "", "input_sample_rate": RATE}
    if "turn_detection" in inp:
        detection = _turn_detection(inp["turn_detection"], f"{path}.input.turn_detection")
        fields.update(turn_detection=detection, no_turn_detection=detection is None)
    return fields


def _turn_detection(value: Any, path: str) -> TurnDetection | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_field(path, f"{path} must be an object or null")
    one_of(value, "type", ("server_vad",), f"{path}.type", default="server_vad")
    if get(value, "idle_timeout_ms", int, f"{path}.idle_timeout_ms") is not None:
        raise bad_field(f"{path}.idle_timeout_ms", f"{path}.idle_timeout_ms is not supported here")
    threshold = get(value, "threshold", float, f"{path}.threshold", default=TurnDetection.threshold)
    if not 0.0 < threshold < 1.0:
        raise bad_field(f"{path}.threshold", f"{path}.threshold must be in (0, 1), got {threshold}")
    ms = {}
    for key in ("prefix_padding_ms", "silence_duration_ms"):
        ms[key] = get(value, key, int, f"{path}.{key}", default=0)
        if not 0 <= ms[key] <= 60_000:
            raise bad_field(f"{path}.{key}", f"{path}.{key} must be in [0, 60000], got {ms[key]}")
    # 0 and absent alike take the session's default, as the conductor reads a configure
    return TurnDetection.with_defaults(
        threshold, ms["prefix_padding_ms"], ms["silence_duration_ms"],
        get(value, "create_response", bool, f"{path}.create_response", default=True),
        get(value, "interrupt_response", bool, f"{path}.interrupt_response", default=True))


def first_config(card: ModelCard) -> Settings:
    """The configure a connection opens with: OpenAI's defaults (audio out when the model
    speaks, server VAD answering and interrupting), PCM at 24 kHz."""
    return Settings(model=card.name, input_sample_rate=RATE,
                    output_modalities=("audio" if card.makes("audio") else "text",),
                    turn_detection=TurnDetection(create_response=True, interrupt_response=True))


def session_json(event: SessionState, card: ModelCard) -> dict:
    """The GA session object of a SessionState (defaults filled in by the conductor)."""
    c = event.state
    detection = None
    if c.turn_detection is not None:
        t = c.turn_detection
        detection = {"type": "server_vad", "threshold": round(t.threshold, 6), "prefix_padding_ms": t.prefix_padding_ms,
                     "silence_duration_ms": t.silence_duration_ms, "create_response": t.create_response,
                     "interrupt_response": t.interrupt_response, "idle_timeout_ms": None}
    params = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in c.params.items()}
    tokens = params.pop("max_new_tokens", None)
    return {"type": "realtime", "object": "realtime.session", "id": event.session_id, "model": c.model or card.name,
            "output_modalities": list(c.output_modalities),
            "instructions": c.instructions,
            "audio": {"input": {"format": PCM, "turn_detection": detection, "transcription": None,
                                "noise_reduction": None},
                      "output": {"format": PCM, "voice": c.voice or None, "speed": 1.0}},
            "max_output_tokens": int(tokens) if tokens is not None else "inf",
            "tools": [], "tool_choice": "auto", "tracing": None, **params}
