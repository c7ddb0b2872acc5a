"""What a model gives the shared dit component through its "dit" hook.

The dit component (services/dit/denoiser.py) owns the nodes, the batching, the loop run
inside the replica and the lockstep group; a model owns what its transformer computes.
Its hook ("module:callable", registered in cluster/registry.py) takes the checkpoint
directory and returns a `DitHook` when the checkpoint is that model's, else None:

    hook(checkpoint) -> DitHook(model, load) | None
    load(checkpoint, dtype, device, offload, group) -> Denoiser

A `Denoiser` says how many guidance branches a step runs and what each is called (SD3:
cond and uncond; a model guiding on text and image separately: three), the conditioning
tensors a branch takes, and how a batch of branches is one transformer forward and the
branches' outputs one scheduler step. Node names follow from the branches: one node
`denoise_<branch>` per branch, whose output the node `combine` takes as input `<branch>`;
the fused `denoise_loop` takes each branch's conditioning as `<prefix><name>`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Protocol

import torch

from core.errors import InvalidArgument
from engine.model_config import DTYPES as TORCH_DTYPES

NODE_PREFIX = "denoise_"
DTYPES = tuple(TORCH_DTYPES)  # the engine's: "float32", "bfloat16", "float16"


@dataclass(frozen=True)
class Branch:
    """One guidance branch of a denoising step."""

    name: str              # the combine node's input; the branch node is denoise_<name>
    loop_prefix: str = ""  # the fused loop's conditioning inputs are <loop_prefix><conditioning name>

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Branch.name {self.name!r} must be an identifier (it names node denoise_<name>)")
        if self.loop_prefix and not self.loop_prefix.isidentifier():
            raise ValueError(f"Branch.loop_prefix {self.loop_prefix!r} must be empty or an identifier prefix")

    @property
    def node(self) -> str:
        return NODE_PREFIX + self.name


@dataclass(frozen=True)
class Conditioning:
    """A conditioning tensor a branch takes: float [1, ...] of `dims` dimensions."""

    name: str
    dims: int

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"Conditioning.name {self.name!r} must be an identifier (it names an input)")
        if self.dims < 1:
            raise ValueError(f"Conditioning.dims must be >= 1, got {self.dims}")


class Denoiser(Protocol):
    """A model's loaded transformer and guidance, as the dit component calls it. Parsed
    params are the model's own type; the component reads `.steps` (int >= 1) only."""

    branches: tuple[Branch, ...]
    conditioning: tuple[Conditioning, ...]

    def parse_params(self, params: Mapping[str, Any]) -> Any:
        """The request's params, checked (INVALID_ARGUMENT naming params.<field>)."""

    def latent_shape(self, params: Any) -> tuple[int, ...]:
        """The latent's shape for these params, e.g. [1, C, h, w]."""

    def initial_latent(self, params: Any) -> torch.Tensor:
        """The seeded starting latent, of latent_shape(params)."""

    def check_conditioning(self, conditioning: Mapping[str, torch.Tensor], node: str, prefix: str = "") -> None:
        """INVALID_ARGUMENT naming open.inputs when the tensors (by conditioning name; their
        inputs are <prefix><name>) do not fit this transformer."""

    def denoise_work(self, branch: str, latent: torch.Tensor, conditioning: Mapping[str, torch.Tensor],
                     params: Any, k: int) -> tuple[Hashable, Any]:
        """(batch key, payload) of branch `branch` at step k: payloads of one key run as one batch."""

    def denoise(self, batch: list[Any]) -> list[torch.Tensor]:
        """One transformer forward over payloads of one key -> each one's prediction (latent-shaped)."""

    def combine(self, latent: torch.Tensor, noise: Mapping[str, torch.Tensor], params: Any, k: int) -> torch.Tensor:
        """The guided scheduler step k: the branches' predictions (by branch name) -> the next latent."""

    def pad_forward(self) -> None:
        """One forward of a dummy input (a lockstep rank pairs its peers' gathers with it)."""

    @property
    def offload_backend(self) -> Any:
        """The transformer's layerwise offload backend, or None."""


@dataclass(frozen=True)
class DitHook:
    """What a model's dit hook returns for a checkpoint of its own."""

    model: str                        # what the checkpoint holds, for logs and errors (e.g. "SD3 MMDiT")
    load: Callable[..., Denoiser]     # (checkpoint, dtype, device, offload, group) -> Denoiser

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("DitHook.model must name what the checkpoint holds")
        if not callable(self.load):
            raise ValueError(f"DitHook.load must be callable, got {self.load!r}")


def check_denoiser(model: Denoiser, where: str) -> None:
    """A model's branches and conditioning must name distinct nodes and inputs."""
    names = [b.name for b in model.branches]
    if not names or len(set(names)) != len(names) or "latent" in names:
        raise ValueError(f"{where}: branches {names} must be distinct, at least one, none named 'latent'")
    loop_inputs = [b.loop_prefix + c.name for b in model.branches for c in model.conditioning]
    if len(set(loop_inputs)) != len(loop_inputs) or "latent" in loop_inputs:
        raise ValueError(f"{where}: the fused loop's conditioning inputs {loop_inputs} must be distinct "
                         "(give the branches different loop_prefix)")

