"""What a KV-cache engine is built with: its checkpoint, KV pool, batching limits and device.

Validated once, here: the engine, its scheduler, KV pool and sequences trust these values.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from core.errors import InvalidArgument
from engine.contexts import ContextLimits
from engine.device_option import resolve_device
from engine.scheduler import SchedulerConfig
from engine.slack_policy import SlackPolicy


@dataclass(frozen=True)
class EngineConfig:
    """checkpoint: a Hugging Face directory. num_blocks x block_size tokens of KV."""

    checkpoint: str = ""
    dtype: str | None = None
    block_size: int = 16
    num_blocks: int = 512
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    prefill_chunk_size: int = 512
    capture_layer: int | None = None   # return this layer's hidden states per token (the talker's input)
    return_embeddings: bool = False    # return input embeddings per token
    device: str = "cpu"                # "cpu", "cuda" or "cuda:N": weights, KV cache and kernels
    cuda_graphs: bool = True           # on CUDA: replay captured graphs for decode steps (ignored on CPU)
    schedule: str = "deadline"         # decode order: "deadline" (least slack first) or "fcfs"
    text_part: str = ""                # a composite checkpoint's part whose text model is served ("": plain)
    # A test hook: every step takes this much longer per sequence in it (sleeps), so a
    # test can make a component slow without depending on the machine's speed.
    step_delay_ms_per_seq: float = 0.0
    prefix_cache: bool = True          # reuse computed KV blocks across requests (off: nothing is shared)
    context_ttl_s: float = 600.0       # a kept context unused this long is dropped
    context_max_blocks: int = 0        # KV blocks all kept contexts may pin (0: half the pool)
    context_max_blocks_per_owner: int = 0  # per owner (0: context_max_blocks)

    def __post_init__(self) -> None:
        self.scheduler_config  # builds it: SchedulerConfig validates the five sizes (positive integers)
        if not 0 <= self.step_delay_ms_per_seq <= 10_000:
            raise InvalidArgument(f"engine.step_delay_ms_per_seq must be in [0, 10000], got "
                                  f"{self.step_delay_ms_per_seq!r}")
        if not isinstance(self.text_part, str):
            raise InvalidArgument(f"engine.text_part must be a string, got {self.text_part!r}")
        if not isinstance(self.cuda_graphs, bool):
            raise InvalidArgument(f"engine.cuda_graphs must be a bool, got {self.cuda_graphs!r}")
        resolve_device(self.device)  # InvalidArgument naming engine.device (e.g. CUDA asked, none here)
        self.context_limits  # builds it: ContextLimits validates the TTL and block limits

    @cached_property
    def scheduler_config(self) -> SchedulerConfig:
        """The scheduler's share of the fields above."""
        return SchedulerConfig(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                               prefill_chunk_size=self.prefill_chunk_size, num_blocks=self.num_blocks,
                               block_size=self.block_size, policy=SlackPolicy(self.schedule),
                               prefix_cache=self.prefix_cache)

    @cached_property
    def context_limits(self) -> ContextLimits:
        """The kept contexts' TTL and block limits (0: half the pool; per owner: the global one)."""
        for name in ("context_max_blocks", "context_max_blocks_per_owner"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"engine.{name} must be an integer >= 0, got {value!r}")
        total = self.context_max_blocks or max(1, self.num_blocks // 2)
        return ContextLimits(ttl_s=self.context_ttl_s, max_blocks=total,
                             max_blocks_per_owner=self.context_max_blocks_per_owner or total)

    @property
    def cuda_graph_sizes(self) -> list[int]:
        """Decode batch sizes to capture as CUDA graphs ([] on CPU or with cuda_graphs off)."""
        if not self.cuda_graphs or resolve_device(self.device).type != "cuda":
            return []
        from engine.cuda_graphs import graph_batch_sizes

        return graph_batch_sizes(self.max_num_seqs)
