"""The dit component takes a model's specifics through its hook: a toy model with three
guidance branches (a text-and-image guided model's shape) gets one node per branch, a
combine over all three, a fused loop equal to the conductor-driven nodes and one batch of
three per step; hooks resolve first-match, and a checkpoint no hook knows is refused
naming it; the registry gives SD3's hooks to the shared dit and vae."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pytest
import torch

from cluster.registry import build_component, hooks_for
from core.errors import InvalidArgument
from runtime.items import NodeError, NodeOutput, OpenNode
from services.dit.denoiser import DitComponent
from services.dit.hook import Branch, Conditioning, DitHook
from services.vae.hook import VaeHook

pytestmark = pytest.mark.timeout(120)
HERE = __name__  # the hooks below, as "module:callable" paths
BRANCHES = (Branch("full"), Branch("text", loop_prefix="text_"), Branch("none", loop_prefix="none_"))
PARAMS = {"steps": 3, "seed": 5, "side": 4}


@dataclass(frozen=True)
class ToyParams:
    steps: int
    seed: int
    side: int

    def __post_init__(self) -> None:
        for name in ("steps", "side"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InvalidArgument(f"params.{name} must be an integer >= 1, got {getattr(self, name)!r}")


class ToyDenoiser:
    """Three branches; the 'transformer' scales the latent by the context's mean."""

    branches = BRANCHES
    conditioning = (Conditioning("context", 2),)  # [1, 3]

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []
        self.num_pads = 0
        self.offload_backend = None

    @classmethod
    def load(cls, checkpoint, dtype, device, offload, group) -> "ToyDenoiser":
        return cls()

    def parse_params(self, params: Mapping[str, Any]) -> ToyParams:
        return ToyParams(**{k: params[k] for k in ("steps", "seed", "side")})

    def latent_shape(self, params: ToyParams) -> tuple[int, ...]:
        return (1, 2, params.side, params.side)

    def initial_latent(self, params: ToyParams) -> torch.Tensor:
        return torch.randn(self.latent_shape(params), generator=torch.Generator().manual_seed(params.seed))

    def check_conditioning(self, conditioning, node: str, prefix: str = "") -> None:
        if conditioning["context"].shape[-1] != 3:
            raise InvalidArgument(f"open.inputs[{prefix}context]: width 3, got {list(conditioning['context'].shape)}")

    def denoise_work(self, branch, latent, conditioning, params, k):
        return ("toy", tuple(latent.shape)), (latent, conditioning["context"], k)

    def denoise(self, batch: list) -> list[torch.Tensor]:
        self.batch_sizes.append(len(batch))
        return [latent * context.mean() + k for latent, context, k in batch]

    def combine(self, latent, noise, params, k) -> torch.Tensor:
        guided = noise["none"] + 2 * (noise["text"] - noise["none"]) + 3 * (noise["full"] - noise["text"])
        return latent - 0.1 * guided

    def pad_forward(self) -> None:
        self.num_pads += 1


def toy_hook(checkpoint: str) -> DitHook | None:
    return DitHook("toy 3-branch DiT", ToyDenoiser.load) if (Path(checkpoint) / "toy.json").is_file() else None


def never_hook(checkpoint: str) -> None:
    return None


def wrong_hook(checkpoint: str) -> str:
    return "not a hook"


@pytest.fixture
def toy(tmp_path) -> DitComponent:
    (tmp_path / "toy.json").write_text(json.dumps({}))
    comp = DitComponent.from_checkpoint(str(tmp_path), hooks=(f"{HERE}:never_hook", f"{HERE}:toy_hook"))
    yield comp
    comp.close()


def drain(comp) -> list:
    events = []
    while comp.has_work():
        events += comp.step()
    assert not any(isinstance(e, NodeError) for e in events), events
    return [e for e in events if isinstance(e, NodeOutput)]


def contexts() -> list[torch.Tensor]:
    return [torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.5, 0.5, 0.5]]), torch.zeros(1, 3)]  # full, text, none


def test_nodes_follow_the_model_branches(toy):
    assert toy.nodes == ("init_latent", "denoise_full", "denoise_text", "denoise_none", "combine", "denoise_loop")
    assert isinstance(toy.model, ToyDenoiser)


def test_conductor_driven_steps_equal_the_fused_loop_and_batch_the_three_branches(toy):
    toy.open(OpenNode("a", "init_latent", params=PARAMS), {})
    latent = initial = drain(toy)[0].tensors["latent"]
    assert latent.shape == (1, 2, 4, 4)
    for k in range(PARAMS["steps"]):
        for branch, context in zip(BRANCHES, contexts()):
            toy.open(OpenNode("a", branch.node, iteration=(k,), params=PARAMS), {"latent": latent, "context": context})
        noise = {e.node.removeprefix("denoise_"): e.tensors["noise"] for e in drain(toy)}
        toy.open(OpenNode("a", "combine", iteration=(k,), params=PARAMS), {"latent": latent, **noise})
        out = drain(toy)[0].tensors
        latent = out["latent"]
        assert out["step"].tolist() == [k + 1, 3] and out["done"].tolist() == [int(k == 2)]
    assert toy.model.batch_sizes == [3, 3, 3]  # each step's three branches: one forward
    inputs = {"latent": initial, **{b.loop_prefix + "context": c for b, c in zip(BRANCHES, contexts())}}
    toy.open(OpenNode("b", "denoise_loop", params=PARAMS), inputs)
    outs = drain(toy)
    assert [o.tensors["step"].tolist() for o in outs] == [[1, 3], [2, 3], [3, 3]]
    assert torch.equal(outs[-1].tensors["latent"], latent) and toy.model.batch_sizes[3:] == [3, 3, 3]


def test_bad_inputs_name_the_branch_input_or_param(toy):
    latent = torch.zeros(1, 2, 4, 4)
    with pytest.raises(InvalidArgument, match=r"open.inputs\[text_context\]"):
        toy.open(OpenNode("x", "denoise_loop", params=PARAMS),
                 {"latent": latent, "context": torch.zeros(1, 3), "text_context": torch.zeros(1, 4),
                  "none_context": torch.zeros(1, 3)})
    with pytest.raises(InvalidArgument, match="needs 'none'"):
        toy.open(OpenNode("x", "combine", iteration=(0,), params=PARAMS), {"latent": latent, "full": latent,
                                                                           "text": latent})
    with pytest.raises(InvalidArgument, match=r"params\.side"):
        toy.open(OpenNode("x", "init_latent", params={**PARAMS, "side": 0}), {})
    with pytest.raises(InvalidArgument, match=r"open.inputs\[latent\]"):
        toy.open(OpenNode("x", "denoise_text", iteration=(0,), params=PARAMS),
                 {"latent": torch.zeros(1, 2, 4, 8), "context": torch.zeros(1, 3)})
    assert not toy.has_work()


def test_a_checkpoint_no_hook_knows_is_refused_naming_it(tmp_path):
    with pytest.raises(InvalidArgument, match=rf"checkpoint '{tmp_path}'.*expected a diffusion transformer"):
        DitComponent.from_checkpoint(str(tmp_path), hooks=(f"{HERE}:never_hook", f"{HERE}:toy_hook"))
    with pytest.raises(InvalidArgument, match="hooks: none given"):
        DitComponent.from_checkpoint(str(tmp_path))
    with pytest.raises(InvalidArgument, match=rf"{HERE}:wrong_hook returned str, not a DitHook"):
        DitComponent.from_checkpoint(str(tmp_path), hooks=(f"{HERE}:wrong_hook",))


def test_the_registry_hands_the_shared_image_components_their_models_hooks(tmp_path):
    from services.sd3.dit_hook import dit_hook
    from services.sd3.vae_hook import vae_hook
    from tests.fixtures import tiny_sd3

    assert "services.sd3.dit_hook:dit_hook" in hooks_for("dit")
    assert "services.sd3.vae_hook:vae_hook" in hooks_for("vae")
    assert dit_hook(str(tmp_path)) is None and vae_hook(str(tmp_path)) is None  # not an SD3 pipeline
    assert isinstance(dit_hook(tiny_sd3.checkpoint()), DitHook)
    assert isinstance(vae_hook(tiny_sd3.checkpoint()), VaeHook)
    with pytest.raises(InvalidArgument, match=rf"checkpoint '{tmp_path}'.*vae hook"):
        build_component("vae", checkpoint=str(tmp_path))
