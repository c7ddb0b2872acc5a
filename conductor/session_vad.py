"""Server voice activity detection for a session: the silero-vad model (the `silero-vad`
package's TorchScript model, shipped in the wheel, run on the conductor's CPU) over the
session's appended audio, resampled to its 16 kHz.

It reads 32 ms windows (512 samples at 16 kHz) and gives each a speech probability.
Speech starts at the first window at or over `threshold`; it stops once windows under
threshold - 0.15 (silero's own hysteresis) last `silence_duration_ms`, at the first such
window. Positions are milliseconds of the session's appended audio.

    vad = SpeechDetector(TurnDetection(), input_rate=24000)
    for mark in vad.feed(pcm16_bytes):   # blocking (~0.1 ms a window): call it off the event loop
        mark.started, mark.audio_ms
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InvalidArgument
from core.session_events import TurnDetection

RATE = 16000    # silero-vad's rate here
WINDOW = 512    # samples a window at RATE (32 ms)
HYSTERESIS = 0.15


@dataclass(frozen=True)
class Mark:
    started: bool
    audio_ms: int


def load_model():
    """The TorchScript model (CPU; stateful: one per session). torch.jit.load warns that
    it is deprecated; it is the package's own loader, and its model is TorchScript."""
    import warnings

    from silero_vad import load_silero_vad

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.jit.load` is deprecated", DeprecationWarning)
        return load_silero_vad()


class SpeechDetector:
    def __init__(self, settings: TurnDetection, input_rate: int, model=None) -> None:
        if not 0 < settings.threshold < 1:
            raise InvalidArgument(f"configure.turn_detection.threshold must be in (0, 1), got {settings.threshold}")
        self.settings, self.input_rate = settings, input_rate
        self.model = model if model is not None else load_model()
        self._pending = np.zeros(0, dtype=np.float32)   # 16 kHz samples not yet in a window
        self._carry = 0.0                               # resampling phase into the next chunk
        self._consumed = 0                              # 16 kHz samples read in windows
        self.in_speech = False
        self._silence_from: int | None = None           # ms where the current silence began

    def feed(self, pcm: bytes) -> list[Mark]:
        import torch

        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._pending = np.concatenate([self._pending, self._resample(samples)])
        marks = []
        with torch.inference_mode():
            while len(self._pending) >= WINDOW:
                window, self._pending = self._pending[:WINDOW], self._pending[WINDOW:]
                prob = float(self.model(torch.from_numpy(window.copy()), RATE))
                marks += self._step(prob, self._consumed * 1000 // RATE)
                self._consumed += WINDOW
        return marks

    def _resample(self, x: np.ndarray) -> np.ndarray:
        """Linear interpolation to 16 kHz (enough for a detector), continuous across chunks."""
        if self.input_rate == RATE or len(x) == 0:
            return x
        step = self.input_rate / RATE
        at = np.arange(self._carry, len(x), step)
        self._carry = at[-1] + step - len(x) if len(at) else self._carry - len(x)
        return np.interp(at, np.arange(len(x)), x).astype(np.float32)

    def _step(self, prob: float, ms: int) -> list[Mark]:
        s = self.settings
        if not self.in_speech:
            if prob >= s.threshold:
                self.in_speech, self._silence_from = True, None
                return [Mark(True, ms)]
            return []
        if prob >= s.threshold - HYSTERESIS:
            self._silence_from = None
            return []
        if self._silence_from is None:
            self._silence_from = ms
        if ms + WINDOW * 1000 // RATE - self._silence_from >= s.silence_duration_ms:
            self.in_speech = False
            return [Mark(False, self._silence_from)]
        return []

    def reset(self) -> None:
        """Forget the speech in progress (the buffer was cleared or committed by hand)."""
        self.in_speech, self._silence_from = False, None
        self.model.reset_states()
