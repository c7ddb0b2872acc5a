"""The world model through real gRPC services on loopback (tests/e2e/world_mesh.py): a
rollout's streamed predictions equal the recompute rollout, concurrent rollouts of
different horizons each get their solo result, a plan equals the engine's own plan,
cancellation returns the KV pool to empty, bad input is INVALID_ARGUMENT naming the
field."""
from __future__ import annotations

import asyncio
import math

import grpc
import pytest
import torch

from engine.models.vjepa2_ac.loop import LoopConfig, encode_frames
from engine.models.vjepa2_ac.rollout_engine import RolloutEngine
from engine.models.vjepa2_ac.planner import CemPlan, PlanConfig, run_plan
from engine.models.vjepa2_ac.recompute import recompute_rollout
from protos.starmesh.v1 import conductor_pb2_grpc
from tests.e2e.image_mesh import collect, rpc_error
from tests.e2e.world_mesh import WorldMesh, request
from tests.fixtures import tiny_vjepa2 as tv
from tests.fixtures.services import wait_until
from tests.fixtures.threads import one_thread

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def mesh():
    with one_thread():
        m = WorldMesh.start()
        yield m
        m.stop()


def _idle(mesh: WorldMesh) -> None:
    assert wait_until(lambda: mesh.conductor_requests() == 0 and mesh.open_requests() == 0, 10.0)
    engine = mesh.component.engine
    assert wait_until(lambda: not engine.rollouts and not engine.prefixes.prefixes, 10.0)
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0


def _rollout_case(num_frames: int, horizon: int, seed: int):
    t_c = num_frames  # one timestep per frame
    return tv.frames(num_frames, seed), tv.actions(t_c + horizon - 1, seed + 1), tv.actions(t_c + horizon - 1,
                                                                                         seed + 2)


def _encode(frames) -> torch.Tensor:
    """[T, HW, D]: the checkpoint's loop (per-frame, normalized)."""
    with torch.no_grad():
        return encode_frames(tv.models()[0], frames, LoopConfig())


def _reference(frames, actions, states, horizon) -> torch.Tensor:
    with torch.no_grad():
        return recompute_rollout(tv.models()[1], _encode(frames)[None], actions[None], states[None], horizon)[0]


def _predictions(out: dict) -> torch.Tensor:
    return torch.stack(out["first_prediction"] + out.get("prediction", []))


@pytest.mark.parametrize("horizon", [1, 4])
def test_rollout_streams_the_recompute_predictions(mesh, horizon):
    frames, actions, states = _rollout_case(4, horizon, seed=horizon)
    out = mesh.generate(request(f"roll-{horizon}", frames=frames, actions=actions, states=states))
    assert len(out["first_prediction"]) == 1 and len(out.get("prediction", [])) == horizon - 1
    torch.testing.assert_close(_predictions(out), _reference(frames, actions, states, horizon), atol=1e-5, rtol=0)
    _idle(mesh)


def test_concurrent_rollouts_get_their_solo_results(mesh):
    cases = [(2, 6, 10), (4, 3, 20), (2, 1, 30), (4, 8, 40)]  # frames, horizon, seed
    reqs = [(request(f"cc{i}", frames=f, actions=a, states=s, horizon=h), (f, a, s, h))
            for i, (nf, h, seed) in enumerate(cases) for f, a, s in [_rollout_case(nf, h, seed)]]

    async def main():
        async with grpc.aio.insecure_channel(mesh.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(req):
                return collect([ev async for ev in stub.Generate(req, timeout=60)])

            return await asyncio.gather(*(one(r) for r, _ in reqs))

    for out, (_, (f, a, s, h)) in zip(asyncio.run(main()), reqs):
        torch.testing.assert_close(_predictions(out), _reference(f, a, s, h), atol=1e-5, rtol=0)
    _idle(mesh)


def test_plan_returns_the_engines_plan(mesh):
    frames, goal = tv.frames(4, seed=3), tv.frames(2, seed=4)
    actions, states = tv.actions(3, seed=5), tv.actions(4, seed=6)   # 4 context timesteps: 3 actions, 4 states
    params = dict(horizon=3, num_candidates=6, num_iterations=2, num_elites=2, seed=11)
    out = mesh.generate(request("plan", frames=frames, goal=goal, actions=actions, states=states, **params))
    feats, goal_feats = _encode(frames), _encode(goal)[-1]
    config = PlanConfig(horizon=3, num_candidates=6, num_iterations=2, num_elites=2, seed=11)
    ref = run_plan(CemPlan(RolloutEngine(tv.models()[1]), "ref", feats, actions, states, goal_feats, config))
    torch.testing.assert_close(out["actions"][0], ref.actions, atol=1e-5, rtol=0)
    assert out["score"][0].item() == pytest.approx(ref.score, abs=1e-5)
    assert out["iteration_scores"][0].tolist() == pytest.approx(ref.iteration_scores, abs=1e-5)
    _idle(mesh)


def test_cancel_mid_rollout_returns_the_pool_to_empty(mesh):
    frames, actions, states = _rollout_case(2, 15, seed=7)
    with grpc.insecure_channel(mesh.address) as channel:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(
            request("cancel", frames=frames, actions=actions, states=states))
        next(call), next(call)  # the rollout is streaming
        call.cancel()
    _idle(mesh)


def test_cancel_mid_plan_returns_the_pool_to_empty(mesh):
    req = request("cancel-plan", frames=tv.frames(4), goal=tv.frames(2), actions=tv.actions(3), states=tv.actions(4),
                  num_candidates=64, num_iterations=100, horizon=4)
    with grpc.insecure_channel(mesh.address) as channel:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(req)
        assert wait_until(lambda: mesh.component.engine.pool.num_used_blocks > 0, 30.0)
        call.cancel()
    _idle(mesh)


def _bad(name: str):
    frames, actions, states = _rollout_case(4, 4, seed=1)
    good = dict(frames=frames, actions=actions, states=states)
    nan_actions = actions.clone()
    nan_actions[1, 2] = math.nan
    return {"frame size": ({**good, "frames": tv.frames(4)[:, :, :32]}, "inputs.frames"),
            "frame count": ({**good, "frames": tv.frames(17)}, "inputs.frames"),   # past the 16 positions
            "action dim": ({**good, "actions": actions[:, :6]}, "inputs.actions"),
            "state dim": ({**good, "states": states[:, :5]}, "inputs.states"),
            "nan action": ({**good, "actions": nan_actions}, "inputs.actions"),
            "nan frame": ({**good, "frames": frames * math.nan}, "inputs.frames"),
            "horizon 0": ({**good, "horizon": 0, "actions": actions[:1]}, "params.horizon"),
            "horizon negative": ({**good, "horizon": -3}, "params.horizon"),
            "horizon past positions": ({**good, "horizon": 16}, "params.horizon"),
            "too few actions": ({**good, "horizon": 6}, "inputs.actions")}[name]


@pytest.mark.parametrize("name", ["frame size", "frame count", "action dim", "state dim", "nan action", "nan frame",
                                  "horizon 0", "horizon negative", "horizon past positions", "too few actions"])
def test_bad_input_is_invalid_argument_naming_the_field(mesh, name):
    fields, field = _bad(name)
    with grpc.insecure_channel(mesh.address) as channel:
        err = rpc_error(conductor_pb2_grpc.ConductorStub(channel).Generate(request(f"bad-{name}", **fields),
                                                                           timeout=30))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.details(), err.details()
    _idle(mesh)


def _cli(mesh: WorldMesh, tmp_path, command: str, **arrays) -> dict:
    import json
    import subprocess
    import sys

    import numpy as np

    from tests.fixtures.services import REPO

    files = []
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value.numpy())
        files += [f"--{name}", str(tmp_path / f"{name}.npy")]
    cmd = [sys.executable, "-m", "cli", command, "--conductor", mesh.address, "--model", "vjepa2_ac", *files,
           "--horizon", "3", "--json"]
    if command == "plan":
        cmd += ["--num-candidates", "4", "--num-iterations", "2", "--num-elites", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_starmesh_rollout_and_plan_cli(mesh, tmp_path):
    frames, actions, states = _rollout_case(4, 3, seed=8)
    report = _cli(mesh, tmp_path, "rollout", frames=frames, actions=actions, states=states)
    assert report["horizon"] == 3 and report["prediction_shape"] == [tv.NUM_PATCHES, 32]
    ref = _reference(frames, actions, states, 3)
    assert report["mean_abs"] == pytest.approx([float(p.abs().mean()) for p in ref], abs=1e-5)
    plan = _cli(mesh, tmp_path, "plan", frames=frames, actions=actions[:3], states=states[:4], goal=tv.frames(2, 9))
    assert len(plan["actions"]) == 3 and len(plan["actions"][0]) == 7
    assert plan["score"] == min(plan["iteration_scores"]) and len(plan["iteration_scores"]) == 2
    _idle(mesh)
