"""The DiT denoiser service: a model's transformer (loaded through its dit hook,
services/dit/hook.py) on a StatelessEngine, hosting the nodes of the guided denoising loop.

    init_latent        params (seed, size)                  -> latent [1, C, h, w] (seeded)
    denoise_<branch>   latent, conditioning (+ step)        -> noise [1, C, h, w] (the prediction);
                       one node per guidance branch of the model (SD3: denoise_cond, denoise_uncond)
    combine            latent, one input per branch (+ step) -> latent (the model's guided
                       scheduler step), step [2], done [1]
    denoise_loop       the whole loop inside this replica (services.dit.denoise_loop)

The step index k is the run's iteration tag (the conductor drives the loop). Denoising
runs of any requests and any branch batch together when the model gives them one key
(one transformer call of batch B): one replica running a request's branches is a batch
of that many; placing branch nodes on several replicas spreads them (CFG-parallel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

import torch

from engine.stateless_engine import StatelessConfig, WorkResult
from services.dit.denoise_loop import BranchTag, DenoiseLoops, LoopRun
from services.dit.hook import DTYPES, Branch, Denoiser, DitHook, check_denoiser
from services.model_hooks import first_hook
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode, OutboundEvent
from core.errors import InvalidArgument


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


def find_dit_hook(hooks: tuple[str, ...], checkpoint: str) -> DitHook:
    return first_hook(hooks, checkpoint, DitHook, "dit", "a diffusion transformer checkpoint of a registered model")


class DitComponent(StatelessComponent):
    name = "dit"

    def __init__(self, model: Denoiser, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        check_denoiser(model, type(model).__name__)
        self.model = model
        self.branch_of = {b.node: b for b in model.branches}  # denoise_<branch> -> Branch
        self.nodes = self.nodes_of(model.branches)
        self.loops = DenoiseLoops(self.engine, tuple(b.name for b in model.branches), self._work, self._combine)

    @staticmethod
    def nodes_of(branches: tuple[Branch, ...]) -> tuple[str, ...]:
        """The nodes a DiT component of a model with these branches runs."""
        return ("init_latent", *(b.node for b in branches), "combine", "denoise_loop")

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        max_batch_size: int = 8, offload=None, dlo_group=None,
                        hooks: tuple[str, ...] = ()) -> "DitComponent":
        """hooks: the registered models' dit hooks (cluster.registry passes them); the first
        that recognises the checkpoint loads it. offload: an engine.offload.OffloadConfig
        (default: the process's, `serve --offload`); the transformer's blocks then stream
        through two slots (layerwise offload). dlo_group: an engine.offload.group.DloGroupConfig
        (default: the process's, `serve --dlo-group`); the replica then steps in lockstep
        with its group (group_member.py)."""
        from engine.offload.group import process_group_config

        config = DitConfig(checkpoint, dtype, device, max_batch_size)
        hook = find_dit_hook(hooks, checkpoint)
        group_config = dlo_group if dlo_group is not None else process_group_config()
        if group_config is not None:
            from services.dit.group_member import GroupMemberDit

            return GroupMemberDit.join(config, hook, offload, group_config)
        model = hook.load(config.checkpoint, config.dtype, config.device, offload, None)
        return cls(model, StatelessConfig(max_batch_size=config.max_batch_size))

    # ---- open: validate, key, payload -------------------------------------------------

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = self.model.parse_params(item.params)
        if item.node == "init_latent":
            return ("init_latent",), params
        k = self._step_index(item, params)
        latent = self._latent(inputs, params, item.node)
        if item.node == "combine":
            noise = {b.name: tensor_input(inputs, b.name, item.node, latent.dim()) for b in self.model.branches}
            bad = {name: list(t.shape) for name, t in noise.items() if t.shape != latent.shape}
            if bad:
                raise InvalidArgument(f"open.inputs: combine needs {sorted(noise)} shaped like the latent "
                                      f"{list(latent.shape)}, got {bad}")
            return ("combine",), (latent, noise, params, k)
        conditioning = self._conditioning(inputs, item.node)
        return self._work(self.branch_of[item.node].name, latent, conditioning, params, k)

    def _work(self, branch: str, latent: torch.Tensor, conditioning: dict, params: Any, k: int) -> tuple:
        """A branch's (key, payload); the model's key is wrapped so it never meets this component's own."""
        key, payload = self.model.denoise_work(branch, latent, conditioning, params, k)
        return ("denoise", key), payload

    def open(self, item: OpenNode, inputs: dict[str, Any]) -> None:
        if item.node != "denoise_loop":
            return super().open(item, inputs)
        params = self.model.parse_params(item.params)
        bound = item.max_iters or params.steps
        if params.steps > bound:
            raise InvalidArgument(f"params.steps ({params.steps}) is past the denoising loop's bound ({bound})")
        latent = self._latent(inputs, params, item.node)
        conditioning = {b.name: self._conditioning(inputs, item.node, b.loop_prefix) for b in self.model.branches}
        self.loops.open(LoopRun(item, latent, conditioning, params, params.steps))

    def _latent(self, inputs: dict[str, Any], params: Any, node: str) -> torch.Tensor:
        expected = tuple(self.model.latent_shape(params))
        latent = tensor_input(inputs, "latent", node, len(expected))
        if tuple(latent.shape) != expected:
            raise InvalidArgument(f"open.inputs[latent]: expected {list(expected)} for the request's params "
                                  f"(size, latent channels), got {list(latent.shape)}")
        return latent

    def _conditioning(self, inputs: dict[str, Any], node: str, prefix: str = "") -> dict[str, torch.Tensor]:
        """One branch's conditioning by name, read from inputs <prefix><name>."""
        conditioning = {c.name: tensor_input(inputs, prefix + c.name, node, c.dims) for c in self.model.conditioning}
        self.model.check_conditioning(conditioning, node, prefix)
        return conditioning

    def cancel(self, request_id: str) -> None:
        super().cancel(request_id)
        self.loops.cancel(request_id)

    def events_for(self, result: WorkResult) -> list[OutboundEvent]:
        if isinstance(result.item.tag, BranchTag):
            return self.loops.on_result(result.item.tag, result)
        return super().events_for(result)

    def _step_index(self, item: OpenNode, params: Any) -> int:
        if not item.iteration:
            raise InvalidArgument(f"open.iteration: node {item.node} runs inside the denoising loop (no step index)")
        k = item.iteration[-1]
        if k >= params.steps:
            raise InvalidArgument(f"open.iteration: step {k} is past params.steps ({params.steps})")
        return k

    # ---- run: one batch of one key --------------------------------------------------

    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        if key[0] == "init_latent":
            return [{"latent": self.model.initial_latent(p)} for p in payloads]  # [1, C, h, w]
        if key[0] == "combine":
            return [self._combine(*p) for p in payloads]
        return [{"noise": prediction} for prediction in self.model.denoise(payloads)]  # [1, C, h, w] each

    def _combine(self, latent: torch.Tensor, noise: dict[str, torch.Tensor], params: Any, k: int) -> dict:
        latent = self.model.combine(latent, noise, params, k)  # [1, C, h, w]
        return {"latent": latent, "step": torch.tensor([k + 1, params.steps]),
                "done": torch.tensor([int(k + 1 == params.steps)])}
