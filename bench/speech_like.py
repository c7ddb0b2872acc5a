"""Speech-like audio made here (no recording shipped): voiced syllables that a speech
detector such as silero-vad takes for speech, and silence, as PCM16 bytes."""
from __future__ import annotations

import numpy as np

RATE = 24000


def vowels(seconds: float, rate: int = RATE, seed: int = 0) -> np.ndarray:
    """Voiced speech-like sound: a 120 Hz glottal pulse train through vowel formants that
    change every 220 ms (syllables), float32 [n] in [-0.5, 0.5]."""
    n = int(seconds * rate)
    t = np.arange(n) / rate
    phase = 2 * np.pi * np.cumsum(120 + 20 * np.sin(2 * np.pi * 3 * t)) / rate
    source = sum(np.sin(k * phase) / k for k in range(1, 30))
    formants = [(700, 1200, 2600), (300, 2300, 3000), (500, 900, 2400), (400, 2000, 2550)]
    out, syllable = np.zeros(n), int(rate * 0.22)
    for i in range(0, n, syllable):
        seg = source[i:i + syllable]
        y = sum(_resonator(seg, f, rate) for f in formants[(i // syllable + seed) % 4])
        out[i:i + syllable] = y * np.sin(np.pi * np.arange(len(seg)) / len(seg)) ** 0.5
    return (out / np.abs(out).max() * 0.5).astype(np.float32)


def _resonator(x: np.ndarray, freq: float, rate: int, bandwidth: float = 80.0) -> np.ndarray:
    """A two-pole resonance at freq (a formant)."""
    r = np.exp(-np.pi * bandwidth / rate)
    a1, a2 = 2 * r * np.cos(2 * np.pi * freq / rate), -r * r
    y, p1, p2 = np.zeros_like(x), 0.0, 0.0
    for i, v in enumerate(x):
        p1, p2 = (1 - r) * v + a1 * p1 + a2 * p2, p1
        y[i] = p1
    return y


def pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()


def silence(seconds: float, rate: int = RATE) -> bytes:
    return bytes(2 * int(seconds * rate))
