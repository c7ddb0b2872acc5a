"""The voice page in a real browser: headless Chromium (tests/gateway/chromium.py) opens
the gateway's `/` with a fake microphone playing a WAV file, connects to /v1/realtime
with the subprotocol key, speaks one push-to-talk turn (and one hands-free, the
server's VAD taking the turn) to the tiny Qwen3-Omni of the real mesh, and the page
shows the model's transcript, plays its audio and measures the turn's time to first
audio. A screenshot is written where STARMESH_TEST_ARTIFACTS points
(else the test's temporary directory)."""
from __future__ import annotations

import json
import os
import urllib.parse
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.gateway.chromium import Chromium, chromium_path
from tests.gateway.gateway_mesh import KEY

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (scripts/setup.sh "
                                                                 "installs Debian's chromium)")]
PARAMS = {"max_output_tokens": 8, "max_frames": 10, "min_frames": 10}


def _microphone(path: Path, pcm: bytes, rate: int = 24000) -> Path:
    """A WAV of 16-bit PCM the fake microphone plays (looped)."""
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm)
    return path


def _tone() -> bytes:
    """1 s of a warbling tone."""
    t = np.arange(24000) / 24000
    return (0.3 * np.sin(2 * np.pi * (220 + 60 * np.sin(2 * np.pi * 3 * t)) * t) * 32767).astype("<i2").tobytes()


def _page(mesh, mode: str) -> str:
    query = urllib.parse.urlencode({"key": KEY, "model": "omni", "mode": mode, "connect": "1",
                                    "params": json.dumps(PARAMS)})
    return f"{mesh.url}/?{query}"


ANSWERED = ("window.voiceState && voiceState.turns.length && voiceState.turns[0].ttfaMs !== null "
            "&& voiceState.turns[0].assistant.length > 0 && voiceState.playedSamples > 0 "
            "&& voiceState.playedSamples === voiceState.scheduledSamples && voiceState")


def _save(png: bytes, name: str, tmp_path: Path) -> None:
    artifacts = Path(os.environ.get("STARMESH_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / name).write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_speaks_a_turn_and_plays_the_answer(mesh, tmp_path):
    with Chromium(_microphone(tmp_path / "mic.wav", _tone()), tmp_path) as browser:
        browser.open(_page(mesh, "ptt"))
        browser.wait_for("window.voiceState && window.voiceState.connected", what="the session opening")
        browser.evaluate("voiceTalk(true)")
        browser.wait_for("voiceState.capturedMs >= 800", what="0.8 s of microphone audio sent")
        browser.evaluate("voiceTalk(false)")
        state = browser.wait_for(ANSWERED, what="the answer's transcript shown and its audio played")
        shown = browser.evaluate("document.querySelector('.turn .assistant').textContent")
        _save(browser.screenshot(), "voice_page.png", tmp_path)
    assert not state["errors"], state["errors"]
    assert shown == "model: " + state["turns"][0]["assistant"]
    assert state["turns"][0]["ttfaMs"] >= 0 and state["playedSamples"] >= 1920   # one 80 ms frame at least


def test_hands_free_the_servers_vad_takes_the_turn(mesh, tmp_path):
    """Hands-free: the microphone streams all along; the conductor's VAD hears the speech
    (speech-like syllables, then silence), commits the turn and answers it."""
    from bench.speech_like import pcm16, silence, vowels

    with Chromium(_microphone(tmp_path / "mic.wav", pcm16(vowels(1.2)) + silence(2.5)), tmp_path) as browser:
        browser.open(_page(mesh, "handsfree"))
        state = browser.wait_for(ANSWERED, what="a turn the server's VAD detected, answered and played")
        _save(browser.screenshot(), "voice_page_hands_free.png", tmp_path)
    assert not state["errors"], state["errors"]
    assert state["turns"][0]["user"].endswith("s of audio)")
