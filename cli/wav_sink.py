"""A WAV file that grows as audio chunks arrive (`starmesh speak -o`)."""
from __future__ import annotations

import os


class WavSink:
    """Mono 16-bit PCM at `sample_rate` (the model's, from ListModels). The file is valid
    after every chunk: `wave` patches the header's lengths on each write (and on close),
    so a player may read it while it grows."""

    def __init__(self, path: str, sample_rate: int) -> None:
        import wave

        if not isinstance(sample_rate, int) or sample_rate <= 0:
            raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
        self.path = path
        self.num_samples = 0
        self.raw = open(path, "wb")  # opened here: wave.open(path) failing leaves a noisy half-built writer
        self.file = wave.open(self.raw, "wb")
        self.file.setnchannels(1)
        self.file.setsampwidth(2)
        self.file.setframerate(sample_rate)

    def write(self, audio) -> None:
        """float32 [S] in [-1, 1] (a numpy array, or anything it reads: a CPU tensor) ->
        16-bit PCM, clipped (little-endian, as WAV wants)."""
        import numpy as np

        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        pcm = np.round(np.clip(samples, -1.0, 1.0) * np.float32(32767.0)).astype("<i2")
        self.file.writeframes(pcm.tobytes())
        self.raw.flush()  # a reader sees every chunk (and the patched header) as it arrives
        self.num_samples += int(pcm.size)

    def close(self, keep: bool = True) -> None:
        self.file.close()
        self.raw.close()
        if not keep:
            os.unlink(self.path)
