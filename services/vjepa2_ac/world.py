"""The world model as a component (V-JEPA 2-AC on the rollout engine).

    encode       frames [F, C, H, W] -> features [T * HW, D]   (T = F per frame, F / tubelet
                 as a clip; layer-normed with normalize_reps: engine.models.vjepa2_ac.loop)
    encode_goal  goal frames [F, C, H, W] -> goal_features [T * HW, D]
    prefill      features, actions [N, A], states [N, A] -> prediction [HW, D] (the
                 first predicted timestep); the rollout keeps its KV blocks, parked
    rollout      a loop run inside this service: one predicted timestep per engine
                 step, prediction [HW, D] at iteration + (k,), done [1] at the last;
                 NodeDone after params.horizon - 1 iterations
    plan         features, goal_features, actions [T_c - 1, A], states [T_c, A] ->
                 actions [H, A] (the best candidate), score [1], iteration_scores [I]

Every rollout and plan candidate advances in the same engine step (one batched forward
per number of fed timesteps); a plan's candidates share its context's KV blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.checkpoint import load_loop, load_world
from engine.models.vjepa2_ac.loop import LoopConfig, encode_frames
from engine.models.vjepa2_ac.params import WorldParams
from engine.models.vjepa2_ac.rollout_engine import RolloutConfig, RolloutEngine
from engine.models.vjepa2_ac.planner import CemPlan
from engine.models.vjepa2_ac.rollouts import Rollout, RolloutFailed
from engine.models.vjepa2_ac.validation import check_frames
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode
from services.vjepa2_ac.world_inputs import plan_inputs, rollout_inputs, tensor

ENCODE_NODES = {"encode": ("frames", "features"), "encode_goal": ("goal", "goal_features")}


@dataclass
class RolloutRun:
    prefill: OpenNode
    rollout: OpenNode | None = None
    is_finished: bool = False   # the engine emitted its last prediction


class WorldComponent:
    name = "world"
    nodes = ("encode", "encode_goal", "prefill", "rollout", "plan")

    def __init__(self, encoder, predictor, config: RolloutConfig = RolloutConfig(),
                 loop: LoopConfig = LoopConfig()) -> None:
        self.encoder, self.predictor, self.loop = encoder, predictor, loop
        # the loop decides: predictions are normalized exactly when the encoder's features are
        self.engine = RolloutEngine(predictor, replace(config, normalize_reps=loop.normalize_reps))
        self.runs: dict[str, RolloutRun] = {}
        self.plans: dict[str, tuple[OpenNode, CemPlan]] = {}
        self._encodes: list[tuple[OpenNode, torch.Tensor]] = []
        self._events: list = []

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu", num_blocks: int = 0,
                        kv_cache_bytes: int = 1 << 30, max_batch: int = 64, frame_encoding: str | None = None,
                        normalize_reps: bool | None = None) -> "WorldComponent":
        """num_blocks: KV blocks (one timestep each); 0: as many as kv_cache_bytes hold.
        frame_encoding, normalize_reps: override the checkpoint's loop (None: keep it)."""
        encoder, predictor = load_world(checkpoint, dtype)
        overrides = {"frame_encoding": frame_encoding, "normalize_reps": normalize_reps}
        loop = replace(load_loop(checkpoint), **{k: v for k, v in overrides.items() if v is not None})
        num_blocks = num_blocks or RolloutEngine.blocks_fitting(predictor, kv_cache_bytes)
        target = torch.device(device)
        if target.type == "cuda" and not torch.cuda.is_available():
            raise InvalidArgument(f"engine.device {device!r}: CUDA is not available here")
        return cls(encoder.to(target), predictor.to(target), RolloutConfig(num_blocks=num_blocks, max_batch=max_batch),
                   loop)

    # ---- opening runs ------------------------------------------------------------------

    def open(self, item: OpenNode, inputs) -> None:
        if item.node in ENCODE_NODES:
            port = ENCODE_NODES[item.node][0]
            frames = tensor(inputs, port, item.node)
            # the context's timesteps are bounded by the predictor's positions; a goal's are not
            limit = self.predictor.config.max_timesteps if port == "frames" else None
            check_frames(port, frames, self.encoder.config, self.loop, limit)
            self._encodes.append((item, frames))
        elif item.node == "prefill":
            self._open_prefill(item, inputs)
        elif item.node == "rollout":
            self._open_rollout(item)
        elif item.node == "plan":
            self._open_plan(item, inputs)
        else:
            raise InvalidArgument(f"open.node {item.node!r}: the world service runs {list(self.nodes)}")

    def _open_prefill(self, item: OpenNode, inputs) -> None:
        x = rollout_inputs(inputs, item.node, WorldParams.from_params(item.params), self.encoder.config,
                           self.predictor.config)
        self.engine.add(Rollout(item.request_id, x.feats, x.actions, x.states, x.horizon))
        self.runs[item.request_id] = RolloutRun(item)

    def _open_rollout(self, item: OpenNode) -> None:
        run = self.runs.get(item.request_id)
        if run is None:
            raise InvalidArgument(f"open.request_id {item.request_id!r}: rollout before prefill")
        run.rollout = item
        if run.is_finished:  # a horizon of 1: prefill's prediction was the only one
            self._events.append(NodeDone(item.request_id, item.node, iteration=item.iteration))
            self.runs.pop(item.request_id)
        else:
            self.engine.unpark(item.request_id)

    def _open_plan(self, item: OpenNode, inputs) -> None:
        x = plan_inputs(inputs, item.node, WorldParams.from_params(item.params), self.encoder.config,
                        self.predictor.config)
        plan = CemPlan(self.engine, item.request_id, x.feats, x.actions, x.states, x.goal, x.config)
        try:
            plan.start()
        except BaseException:  # e.g. candidates that cannot fit the pool: drop its prefix too
            self.engine.abort(item.request_id)
            raise
        self.plans[item.request_id] = (item, plan)

    def push(self, item, tensors) -> None:
        raise InvalidArgument(f"push.node {item.node!r}: the world service takes no streamed input")

    def cancel(self, request_id: str) -> None:
        self.runs.pop(request_id, None)
        self.plans.pop(request_id, None)
        self.engine.abort(request_id)
        self._encodes = [(i, f) for i, f in self._encodes if i.request_id != request_id]
        self._events = [e for e in self._events if e.request_id != request_id]

    # ---- stepping ----------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self._events or self._encodes) or self.engine.has_work()

    def step(self) -> list:
        self._run_encodes()
        for out in self.engine.step():
            if out.group in self.plans:
                self.plans[out.group][1].on_output(out)
            elif out.group in self.runs:
                self._on_rollout(self.runs[out.group], out)
        self._advance_plans()
        events, self._events = self._events, []
        return events

    @torch.inference_mode()
    def _run_encodes(self) -> None:
        for item, frames in self._encodes:
            weight = self.encoder.layernorm.weight
            feats = encode_frames(self.encoder, frames.to(weight.device, weight.dtype), self.loop)  # [T, HW, D]
            feats = feats.flatten(0, 1)
            port = ENCODE_NODES[item.node][1]
            self._events += [NodeOutput(item.request_id, item.node, {port: feats.float().cpu()}, item.iteration),
                             NodeDone(item.request_id, item.node, iteration=item.iteration)]
        self._encodes = []

    def _on_rollout(self, run: RolloutRun, out) -> None:
        if isinstance(out, RolloutFailed):
            node = run.rollout or run.prefill
            self._events.append(NodeError(node.request_id, node.node, out.error.status, str(out.error),
                                          node.iteration))
            self.runs.pop(node.request_id, None)
            return
        pred = {"prediction": out.prediction.float().cpu()}
        if out.index == 0:
            p = run.prefill
            self._events += [NodeOutput(p.request_id, p.node, pred, p.iteration),
                             NodeDone(p.request_id, p.node, iteration=p.iteration)]
            run.is_finished = out.is_last
            if not out.is_last:
                self.engine.park(out.rollout_id)
            return
        r = run.rollout
        tensors = {**pred, **({"done": torch.ones(1, dtype=torch.int64)} if out.is_last else {})}
        self._events.append(NodeOutput(r.request_id, r.node, tensors, r.iteration + (out.index - 1,)))
        if out.is_last:
            self._events.append(NodeDone(r.request_id, r.node, iteration=r.iteration))
            self.runs.pop(r.request_id, None)

    def _advance_plans(self) -> None:
        for rid, (item, plan) in list(self.plans.items()):
            if plan.error is not None:
                self.engine.abort(rid)
                self._events.append(NodeError(rid, item.node, plan.error.status, str(plan.error), item.iteration))
                del self.plans[rid]
            elif plan.is_iteration_done and plan.advance():
                res = plan.result
                tensors = {"actions": res.actions, "score": torch.tensor([res.score]),
                           "iteration_scores": torch.tensor(res.iteration_scores)}
                self._events += [NodeOutput(rid, item.node, tensors, item.iteration),
                                 NodeDone(rid, item.node, iteration=item.iteration)]
                del self.plans[rid]

    def load(self) -> dict:
        return {**self.engine.load(), "plans": len(self.plans)}

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        for rid in list(self.runs) + list(self.plans):
            self.cancel(rid)
