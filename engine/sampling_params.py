"""Per-request sampling and stop parameters (what a client asks for; validated once,
at the edge, so the engine never sees a nonsensical request), and TextParams: the
request keys of text generation that become them."""
from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass

from core.errors import InvalidArgument
from core.context_use import ContextParams
from core.params import RequestParams, group, param


# Bounds that keep float32 logits finite: dividing by a temperature below ~1e-36, or
# scaling by a penalty past ~1e36, turns them into +-inf and the softmax into NaN,
# which would fail the whole batch's sampling step (every request in it), not just
# the request that asked. Real use sits far inside both.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3
MIN_PENALTY, MAX_PENALTY = 1e-3, 1e3


@functools.lru_cache(maxsize=256)
def shared_ids(ids: tuple[int, ...]) -> tuple[int, ...]:
    """The first-seen tuple equal to `ids`: requests of one model carry their suppressed and
    EOS ids as one object, so the sampler groups their rows by identity instead of hashing
    ~1000 ids per row per step (engine.sampler.processed_greedy). Bounded: a rare id set
    only costs a hash when its params are built."""
    return ids


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0          # 0 -> greedy
    top_k: int = 0                    # 0 -> off
    top_p: float = 1.0                # 1 -> off
    # HF semantics: logits of already-seen ids (prompt + output) are divided by the
    # penalty when positive, multiplied when negative. 1 -> off.
    repetition_penalty: float = 1.0
    penalize_prompt: bool = True   # False: the penalty sees output ids only (HF with inputs_embeds)
    suppress_token_ids: tuple[int, ...] = ()   # never sampled
    min_new_tokens: int = 0           # EOS ids are suppressed until this many tokens (HF semantics)
    seed: int | None = None
    # The eos/stop token that ends a request is kept in its output ids (as HF generate does).
    eos_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # Lists are accepted for convenience; tuples keep the params hashable and immutable.
        for name in ("suppress_token_ids", "eos_token_ids", "stop_token_ids"):
            ids = tuple(getattr(self, name))
            plain = all(type(i) is int for i in ids)  # the usual case: skips the per-id ABC checks
            if not (plain or all(_is_int(i) for i in ids)) or (ids and min(ids) < 0):
                raise InvalidArgument(f"{name} must be non-negative integers, got {list(ids)}")
            object.__setattr__(self, name, shared_ids(ids if plain else tuple(int(i) for i in ids)))
        for name in ("max_new_tokens", "top_k", "min_new_tokens"):
            if not _is_int(getattr(self, name)):
                raise InvalidArgument(f"{name} must be an integer, got {getattr(self, name)!r}")
            object.__setattr__(self, name, int(getattr(self, name)))  # numpy ints -> int
        for name in ("temperature", "top_p", "repetition_penalty"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise InvalidArgument(f"{name} must be a number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.max_new_tokens <= 0:
            raise InvalidArgument(f"max_new_tokens must be > 0, got {self.max_new_tokens}")
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE):  # NaN too
            raise InvalidArgument(f"temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], "
                                  f"got {self.temperature}")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise InvalidArgument(f"min_new_tokens must be in 0..max_new_tokens, got {self.min_new_tokens}")
        if self.top_k < 0:
            raise InvalidArgument(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidArgument(f"top_p must be in (0, 1], got {self.top_p}")
        if not MIN_PENALTY <= self.repetition_penalty <= MAX_PENALTY:
            raise InvalidArgument(f"repetition_penalty must be in [{MIN_PENALTY:g}, {MAX_PENALTY:g}], "
                                  f"got {self.repetition_penalty}")
        if self.seed is not None and not _is_int(self.seed):
            raise InvalidArgument(f"seed must be an integer, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_logit_processing(self) -> bool:
        """Whether anything but a plain argmax/draw touches this request's logits."""
        return self.repetition_penalty != 1.0 or bool(self.suppress_token_ids) or self.min_new_tokens > 0


def _is_int(x: object) -> bool:
    # numbers.Integral admits numpy integers; bool is an int but never a count.
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass(frozen=True)
class TextParams(RequestParams):
    """A text-generation request's params (the keys a client sends), parsed from the
    request once; `sampling` turns them into the engine's SamplingParams."""

    max_new_tokens: int = param(16, min=1, help="at most this many generated tokens")
    temperature: float = param(0.0, min=0, help="0: greedy")
    top_k: int = param(0, min=0, help="sample from the k most likely tokens (0: off)")
    top_p: float = param(1.0, min=0, max=1, exclusive_min=True, help="nucleus sampling mass (1: off)")
    repetition_penalty: float = param(1.0, min=0, exclusive_min=True, help="HF semantics (1: off)")
    seed: int | None = param(None, kind=int, help="per-request sampling seed")
    suppress_token_ids: tuple[int, ...] = param((), help="ids never sampled")
    stop_token_ids: tuple[int, ...] = param((), help="ids that end the request, besides EOS")
    ignore_eos: bool = param(False, help="generate past EOS (max_new_tokens ends the request)")
    # context_id / keep_context: read by the conductor, which tells each engine what to do
    # with kept contexts on the run itself (OpenNode.contexts), with their owner
    context: ContextParams = group(ContextParams)

    def sampling(self, eos_token_ids: tuple[int, ...], stop_token_ids: tuple[int, ...] = ()) -> SamplingParams:
        """eos_token_ids: the checkpoint's; stop_token_ids: the graph's, added to the request's."""
        return SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_k=self.top_k,
                              top_p=self.top_p, repetition_penalty=self.repetition_penalty, seed=self.seed,
                              suppress_token_ids=self.suppress_token_ids,
                              eos_token_ids=() if self.ignore_eos else eos_token_ids,
                              stop_token_ids=tuple(stop_token_ids) + self.stop_token_ids)
