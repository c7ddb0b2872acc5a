"""A speech request and its result, as the in-process runner and the mesh both see them."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.errors import InvalidArgument


@dataclass(frozen=True)
class SpeechRequest:
    """Chat-formatted prompt ids in; text ids, codec frames and 24 kHz audio out.

    Sampling is greedy unless a temperature is given; HF generate's talker defaults are
    temperature 0.9, top_k 50, repetition penalty 1.05. `first_chunk` (frames) lets the
    first audio chunk be smaller than `chunk_size` to cut time to first audio.
    """

    request_id: str
    prompt_ids: tuple[int, ...]
    max_text_tokens: int = 64
    max_frames: int = 256
    min_frames: int = 0                 # codec EOS is suppressed before this many frames
    text_temperature: float = 0.0
    text_stop_ids: tuple[int, ...] = ()  # besides the checkpoint's EOS ids (HF: thinker_eos_token_id)
    talker_temperature: float = 0.0
    talker_top_k: int = 50
    talker_top_p: float = 1.0
    repetition_penalty: float = 1.05
    seed: int | None = None
    speaker: str = "ethan"
    chunk_size: int = 300               # C: frames per code2wav window
    left_context: int = 25              # L: frames of left context per window
    first_chunk: int = 0                # 0: the first window is chunk_size frames too
    media: object = None                # engine.prompt_media.PromptMedia: the prompt's audio/image rows

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        object.__setattr__(self, "text_stop_ids", tuple(int(t) for t in self.text_stop_ids))
        if not self.prompt_ids:
            raise InvalidArgument("prompt_ids is empty")
        for name in ("max_text_tokens", "max_frames", "chunk_size"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.left_context < 0 or self.first_chunk < 0 or self.min_frames < 0:
            raise InvalidArgument("left_context, first_chunk and min_frames must be >= 0")
        if self.min_frames > self.max_frames:
            raise InvalidArgument(f"min_frames ({self.min_frames}) must be <= max_frames ({self.max_frames})")


@dataclass
class SpeechResult:
    request_id: str
    text_ids: list[int] = field(default_factory=list)      # generated text ids (EOS included)
    frames: list[list[int]] = field(default_factory=list)  # [F][G] codec codes
    chunks: list[torch.Tensor] = field(default_factory=list)  # audio chunks [S_i] float32, in order
    finish_reason: str | None = None

    @property
    def audio(self) -> torch.Tensor:  # [S] float32 at 24 kHz
        return torch.cat(self.chunks) if self.chunks else torch.zeros(0)

    @property
    def codes(self) -> torch.Tensor:  # [F, G] int64
        return torch.tensor(self.frames, dtype=torch.int64).reshape(len(self.frames), -1)
