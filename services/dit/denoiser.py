"""The DiT denoiser service: SD3's transformer (engine.models.sd3.dit) on a
StatelessEngine, hosting the nodes of the denoising loop.

    init_latent      params (seed, size)              -> latent [1, C, h, w] (seeded Gaussian)
    denoise_cond     latent, embeds, pooled (+ step)  -> noise [1, C, h, w] (velocity)
    denoise_uncond   the same node kind, other branch -> noise
    combine          latent, cond, uncond (+ step)    -> latent (guided Euler step), step [2], done [1]
    denoise_loop     the whole CFG loop inside this replica (services.dit.denoise_loop)

The step index k is the run's iteration tag (the conductor drives the loop); the
timestep and sigmas come from the request's (steps, size) schedule. Denoising runs of
any requests and either branch batch together when their shapes match (one
transformer call of batch B, per-sample timesteps): one replica running both branches
of a request is a batch of 2; CFG-parallel places the branches on two replicas.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

import torch

from engine.stateless_engine import StatelessConfig, WorkResult
from engine.models.sd3.checkpoint import DTYPES
from engine.models.sd3.dit import DenoiseInput, Sd3Dit
from services.dit.denoise_loop import BranchTag, DenoiseLoops, LoopRun
from engine.models.sd3.guidance import euler_step, guide
from engine.models.sd3.params import ImageParams
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode, OutboundEvent
from core.errors import InvalidArgument

DENOISE_NODES = ("denoise_cond", "denoise_uncond")


@dataclass(frozen=True)
class DitConfig:
    checkpoint: str
    dtype: str = "float32"
    device: str = "cpu"
    max_batch_size: int = 8

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"DitConfig.dtype {self.dtype!r} is not one of {DTYPES}")
        if self.max_batch_size < 1:
            raise ValueError(f"DitConfig.max_batch_size must be >= 1, got {self.max_batch_size}")


def tensor_input(inputs: dict, name: str, node: str, dims: int) -> torch.Tensor:
    if name not in inputs:
        raise InvalidArgument(f"open.inputs: node {node} needs {name!r} (got {sorted(inputs)})")
    t = inputs[name]
    if t.dim() != dims or t.shape[0] != 1 or not t.is_floating_point():
        raise InvalidArgument(f"open.inputs[{name}]: node {node} takes a float [1, ...] tensor of {dims} dims, "
                              f"got {t.dtype} {list(t.shape)}")
    return t


class DitComponent(StatelessComponent):
    name = "dit"
    nodes = ("init_latent", *DENOISE_NODES, "combine", "denoise_loop")

    def __init__(self, model: Sd3Dit, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model
        # what open() checks requests against (immutable, read from the checkpoint)
        self.schedule, self.geometry, self.embed_dims = model.schedule, model.geometry, model.embed_dims
        self.loops = DenoiseLoops(self.engine, self._combine)

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        max_batch_size: int = 8, offload=None, dlo_group=None) -> "DitComponent":
        """offload: an engine.offload.OffloadConfig (default: the process's, `serve --offload`);
        the transformer's blocks then stream through two slots (layerwise offload).
        dlo_group: an engine.offload.group.DloGroupConfig (default: the process's, `serve
        --dlo-group`); the replica then steps in lockstep with its group (group_member.py)."""
        from engine.offload.group import process_group_config

        config = DitConfig(checkpoint, dtype, device, max_batch_size)
        group_config = dlo_group if dlo_group is not None else process_group_config()
        if group_config is not None:
            from services.dit.group_member import GroupMemberDit

            return GroupMemberDit.join(config, offload, group_config)
        model = Sd3Dit.load(config.checkpoint, config.dtype, config.device, offload)
        return cls(model, StatelessConfig(max_batch_size=config.max_batch_size))

    # ---- open: validate, key, payload -------------------------------------------------

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = self._params(item)
        if item.node == "init_latent":
            return ("init_latent",), params
        k = self._step_index(item, params)
        latent = self._latent(inputs, params, item.node)
        schedule = self.schedule.get(params.steps, latent.shape[-2:])
        if item.node == "combine":
            cond, uncond = (tensor_input(inputs, n, item.node, 4) for n in ("cond", "uncond"))
            if cond.shape != latent.shape or uncond.shape != latent.shape:
                raise InvalidArgument(f"open.inputs: combine needs cond and uncond shaped like the latent "
                                      f"{list(latent.shape)}, got {list(cond.shape)} and {list(uncond.shape)}")
            return ("combine",), (latent, cond, uncond, params, k, schedule)
        embeds, pooled = self._conditioning(inputs, "embeds", "pooled", item.node)
        return self._denoise_key(latent, embeds), DenoiseInput(latent, embeds, pooled, schedule.timesteps[k])

    def open(self, item: OpenNode, inputs: dict[str, Any]) -> None:
        if item.node != "denoise_loop":
            return super().open(item, inputs)
        params = self._params(item)
        bound = item.max_iters or params.steps
        if params.steps > bound:
            raise InvalidArgument(f"params.steps ({params.steps}) is past the denoising loop's bound ({bound})")
        latent = self._latent(inputs, params, item.node)
        cond = self._conditioning(inputs, "embeds", "pooled", item.node)
        uncond = self._conditioning(inputs, "negative_embeds", "negative_pooled", item.node)
        if cond[0].shape != uncond[0].shape:
            raise InvalidArgument(f"open.inputs: embeds {list(cond[0].shape)} and negative_embeds "
                                  f"{list(uncond[0].shape)} differ in shape")
        schedule = self.schedule.get(params.steps, latent.shape[-2:])
        self.loops.open(LoopRun(item, latent, {"cond": cond, "uncond": uncond}, params, schedule,
                                self._denoise_key(latent, cond[0]), params.steps))

    def _params(self, item: OpenNode) -> ImageParams:
        params = ImageParams.from_params(item.params)
        params.check_size(self.geometry.size_multiple, self.geometry.max_side)
        return params

    def _latent(self, inputs: dict[str, Any], params: ImageParams, node: str) -> torch.Tensor:
        latent = tensor_input(inputs, "latent", node, 4)
        expected = params.latent_shape(self.geometry.latent_channels, self.geometry.vae_scale_factor)
        if tuple(latent.shape) != expected:
            raise InvalidArgument(f"open.inputs[latent]: expected {list(expected)} for params.width x params.height "
                                  f"{params.width}x{params.height}, got {list(latent.shape)}")
        return latent

    def _conditioning(self, inputs: dict[str, Any], embeds_name: str, pooled_name: str, node: str) -> tuple:
        embeds = tensor_input(inputs, embeds_name, node, 3)  # [1, S, D]
        pooled = tensor_input(inputs, pooled_name, node, 2)  # [1, P]
        if (embeds.shape[-1], pooled.shape[-1]) != self.embed_dims:
            raise InvalidArgument(f"open.inputs: {embeds_name} [1, S, D] and {pooled_name} [1, P] need (D, P) = "
                                  f"{self.embed_dims}, got {list(embeds.shape)} and {list(pooled.shape)}")
        return embeds, pooled

    @staticmethod
    def _denoise_key(latent: torch.Tensor, embeds: torch.Tensor) -> tuple:
        return ("denoise", tuple(latent.shape), tuple(embeds.shape))

    def cancel(self, request_id: str) -> None:
        super().cancel(request_id)
        self.loops.cancel(request_id)

    def events_for(self, result: WorkResult) -> list[OutboundEvent]:
        if isinstance(result.item.tag, BranchTag):
            return self.loops.on_result(result.item.tag, result)
        return super().events_for(result)

    def _step_index(self, item: OpenNode, params: ImageParams) -> int:
        if not item.iteration:
            raise InvalidArgument(f"open.iteration: node {item.node} runs inside the denoising loop (no step index)")
        k = item.iteration[-1]
        if k >= params.steps:
            raise InvalidArgument(f"open.iteration: step {k} is past params.steps ({params.steps})")
        return k

    # ---- run: one batch of one key --------------------------------------------------

    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        if key[0] == "init_latent":
            return [self._init_latent(p) for p in payloads]
        if key[0] == "combine":
            return [self._combine(*p) for p in payloads]
        return self._denoise(payloads)

    def _init_latent(self, params: ImageParams) -> dict[str, torch.Tensor]:
        shape = params.latent_shape(self.geometry.latent_channels, self.geometry.vae_scale_factor)
        return {"latent": self.model.initial_latent(shape, params.seed)}  # [1, C, h, w]

    def _denoise(self, payloads: list[DenoiseInput]) -> list[dict[str, torch.Tensor]]:
        return [{"noise": velocity} for velocity in self.model.denoise(payloads)]  # [1, C, h, w] each

    def _combine(self, latent, cond, uncond, params: ImageParams, k: int, schedule) -> dict[str, torch.Tensor]:
        noise = guide(cond, uncond, params.guidance, params.renorm)  # [1, C, h, w]
        latent = euler_step(latent, noise, schedule.sigmas[k], schedule.sigmas[k + 1])
        return {"latent": latent, "step": torch.tensor([k + 1, params.steps]),
                "done": torch.tensor([int(k + 1 == params.steps)])}
