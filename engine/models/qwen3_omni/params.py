"""The talker's request params: the keys of a speech request the talker reads (the thinker
reads the unprefixed sampling keys of the same request: engine.sampling_params.TextParams)."""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidArgument
from core.params import RequestParams, param

DEFAULT_MAX_FRAMES = 4096  # the talker's bound when neither the request nor the loop gives one


@dataclass(frozen=True)
class TalkerParams(RequestParams):
    """Sampling is greedy unless talker_temperature is given (HF generate's talker samples
    at 0.9 with top_k 50 and repetition penalty 1.05)."""

    max_frames: int | None = param(None, kind=int, min=1, help="at most this many codec frames (12.5 per second)")
    min_frames: int = param(0, min=0, help="the codec's end is suppressed before this many frames")
    talker_temperature: float = param(0.0, min=0, help="talker sampling temperature (0: greedy)")
    talker_top_k: int = param(50, min=0, help="talker top-k (0: off)")
    talker_top_p: float = param(1.0, min=0, max=1, exclusive_min=True, help="talker nucleus mass (1: off)")
    talker_repetition_penalty: float = param(1.05, min=0, exclusive_min=True,
                                             help="penalty on codec ids already spoken (1: off)")
    seed: int | None = param(None, kind=int, help="per-request sampling seed")
    speaker: str = param("ethan", help="talker voice, e.g. ethan or chelsie")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_frames is not None and self.min_frames > self.max_frames:
            raise InvalidArgument(f"params.min_frames ({self.min_frames}) must be <= params.max_frames "
                                  f"({self.max_frames})")

    def sampling_kwargs(self, max_iters: int = 0, room: int | None = None) -> dict:
        """TalkerEngine.talker_params kwargs. max_iters: the talker loop's own bound (0:
        none), which also caps a larger max_frames. room: the frames the talker's context
        holds after this request's prompt (None: not known). A bound the client did not
        set is clamped to the room: a default must fit whatever context the checkpoint
        and the KV pool give. A max_frames (or min_frames) the client set past it is
        refused naming the field."""
        bound = self.max_frames or max_iters or DEFAULT_MAX_FRAMES
        if max_iters:
            bound = min(bound, max_iters)
        min_frames = self.min_frames
        if room is not None and room < 1:
            # the prompt alone fills the context: one frame, so that the engine refuses it as the prompt's fault
            bound, min_frames = 1, 0
        elif room is not None:
            if self.max_frames is not None and bound > room:
                raise InvalidArgument(f"params.max_frames is {self.max_frames}, past what the talker's context "
                                      f"holds after this prompt: at most {room} frames")
            bound = min(bound, room)
            if min_frames > bound:
                raise InvalidArgument(f"params.min_frames is {min_frames}, past what the talker's context "
                                      f"holds after this prompt: at most {bound} frames")
        return dict(max_new_tokens=bound, min_new_tokens=min_frames, temperature=self.talker_temperature,
                    top_k=self.talker_top_k, top_p=self.talker_top_p,
                    repetition_penalty=self.talker_repetition_penalty, seed=self.seed)
