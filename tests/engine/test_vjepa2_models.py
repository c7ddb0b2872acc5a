"""The V-JEPA 2 encoder equals transformers' VJEPA2Model, and the AC predictor equals the
upstream VisionTransformerPredictorAC, on the tiny checkpoint with the same weights
(fp32, atol 1e-5); the upstream key layout loads; bf16 runs."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.checkpoint import load_predictor_state, upstream_predictor_state
from engine.models.vjepa2_ac.predictor import ACPredictor
from tests.fixtures import tiny_vjepa2 as tv
from tests.fixtures.threads import one_thread


@pytest.fixture(scope="module")
def world():
    return tv.models()


@pytest.mark.parametrize("num_frames", [1, 2, 4])
def test_encoder_equals_transformers(world, num_frames):
    from transformers import VJEPA2Model

    encoder, _ = world
    ref = VJEPA2Model.from_pretrained(f"{tv.checkpoint()}/encoder").eval()
    video = tv.frames(num_frames)[None]  # [1, F, 3, 64, 64]
    with torch.no_grad(), one_thread():
        ours, theirs = encoder(video), ref.get_vision_features(video)
    assert ours.shape == theirs.shape == (1, max(1, num_frames // 2) * tv.NUM_PATCHES, 32)
    assert theirs.std() > 0.1  # not a degenerate output
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def _inputs(num_steps: int, batch: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, num_steps * tv.NUM_PATCHES, 32, generator=g),
            torch.randn(batch, num_steps, 7, generator=g), torch.randn(batch, num_steps, 7, generator=g))


@pytest.mark.filterwarnings("ignore:.*sdp_kernel:FutureWarning")  # the upstream module uses the old API
@pytest.mark.parametrize("num_steps", [1, 3, 16])
def test_predictor_equals_upstream(world, num_steps):
    _, predictor = world
    ref = tv.upstream_predictor(predictor)
    if ref is None:
        pytest.skip("cc-vjepa2 (the upstream predictor) is not installed")
    x, a, s = _inputs(num_steps)
    with torch.no_grad(), one_thread():
        ours, theirs = predictor(x, a, s), ref(x, a, s)
    assert theirs.std() > 0.1
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_upstream_key_layout_loads(world):
    _, predictor = world
    released = {"module." + k: v.clone() for k, v in predictor.state_dict().items()}  # a training checkpoint
    fresh = ACPredictor(predictor.config)
    load_predictor_state(fresh, released)
    x, a, s = _inputs(2)
    with torch.no_grad(), one_thread():
        torch.testing.assert_close(fresh(x, a, s), predictor(x, a, s), atol=0, rtol=0)
    assert set(upstream_predictor_state(released)) == set(predictor.state_dict())


def test_missing_tensor_is_named(world):
    _, predictor = world
    state = dict(predictor.state_dict())
    state.pop("predictor_proj.bias")
    with pytest.raises(InvalidArgument, match="predictor_proj.bias"):
        load_predictor_state(ACPredictor(predictor.config), state)


def test_bf16_runs_close_to_fp32(world):
    _, predictor = world
    half = ACPredictor(predictor.config)
    half.load_state_dict(predictor.state_dict())
    half = half.to(torch.bfloat16)
    x, a, s = _inputs(2, batch=1)
    with torch.no_grad(), one_thread():
        ref = predictor(x, a, s)
        out = half(x.bfloat16(), a.bfloat16(), s.bfloat16()).float()
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert (out - ref).abs().mean() < 0.05 * ref.abs().mean()


def test_the_checkpoint_names_its_loop(tmp_path):
    import json

    from engine.models.vjepa2_ac.checkpoint import load_loop, write_manifest
    from engine.models.vjepa2_ac.loop import LoopConfig

    assert load_loop(tv.checkpoint()) == LoopConfig("per_frame", True)   # the upstream loop by default
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vjepa2_ac"}))
    assert load_loop(tmp_path) == LoopConfig()
    write_manifest(tmp_path, LoopConfig("clip", False))
    assert load_loop(tmp_path) == LoopConfig("clip", False)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vjepa2_ac", "frame_encoding": "tubelets"}))
    with pytest.raises(InvalidArgument, match="frame_encoding"):
        load_loop(tmp_path)
