"""The talker as a component: node `talker` (and `talker_media`, the same loop for a prompt
with audio, images or videos: it also takes prompt_hidden, image_grids [k, 3], video_grids
[k, 3] and video_seconds [k]), a loop run
inside the service.

open(inputs):  prompt_ids [P] (the chat prompt the thinker saw), prompt_embeds
               [n, thinker_hidden] (and optionally prompt_hidden): the thinker rows known so
               far, usually its prompt's; params: TalkerParams (speaker, max_frames,
               min_frames, seed, talker_temperature, ...; the thinker reads the unprefixed
               sampling params of the same request).
               Without a `stream` (the stage-pipeline baseline, bench/stage_graph.py), open also takes the
               thinker's decode rows as `embeds` (and `hidden`) and the thinker is done.
push(stream port, e.g. "embeds"): further rows, one per thinker decode step (and "hidden");
               end_of_stream = the thinker is done. The talker goes on until its codec EOS.
outputs:       one output per frame, {"codes": int64 [1, G]} at iteration + (k,), a step's
               frames returned together (NodeOutputs, codes [N, G]); NodeDone at the
               run's iteration once the talker stops.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.engine_core import CREDIT
from engine.engine_load import engine_load
from engine.llm_engine import EngineConfig
from engine.models.qwen3_omni.params import TalkerParams
from engine.models.qwen3_omni.talker_engine import TalkerEngine
from engine.models.qwen3_omni.talker_prompt import CODEC_HEAD, user_positions
from engine.models.qwen3_omni.talker_request import set_videos
from runtime.items import NodeDone, NodeError, NodeOutputs, OpenNode
from core.errors import InvalidArgument


# the assistant head of a talker prompt: three text rows without a codec id, then one row
# per CODEC_HEAD entry (engine/models/qwen3_omni/talker_prompt.py)
ASSISTANT_HEAD_ROWS = 3 + len(CODEC_HEAD)


def talker_prompt_len(prompt_ids: list[int], tokens: dict) -> int:
    """How many rows the talker's prompt for a thinker prompt has: its user-turn positions
    and the assistant head (talker_prompt), known before the thinker's rows arrive."""
    return len(user_positions(prompt_ids, tokens)) + ASSISTANT_HEAD_ROWS


@dataclass
class TalkerRun:
    item: OpenNode
    num_frames: int = 0


def _grids(grids, name: str = "image_grids") -> tuple:
    """image_grids / video_grids [k, 3] integer (t, h, w) -> ((t, h, w), ...)."""
    if grids is None or grids.numel() == 0:
        return ()
    if grids.dtype.is_floating_point or grids.shape[-1] != 3:
        raise InvalidArgument(f"open.inputs.{name} must be integer [k, 3], got {grids.dtype} {tuple(grids.shape)}")
    return tuple(tuple(g) for g in grids.reshape(-1, 3).tolist())


def _seconds(seconds) -> tuple:
    """video_seconds [k] float -> (seconds per temporal patch, ...)."""
    if seconds is None or seconds.numel() == 0:
        return ()
    if not seconds.dtype.is_floating_point:
        raise InvalidArgument(f"open.inputs.video_seconds must be float [k], got {seconds.dtype}")
    return tuple(seconds.reshape(-1).tolist())


def _as_rows(embeds) -> torch.Tensor:
    """Thinker rows of any leading shape as float32 [n, thinker_hidden]; InvalidArgument
    for a tensor that is not floating rows."""
    if embeds.dim() == 0 or embeds.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise InvalidArgument(f"thinker rows must be floating [n, thinker_hidden], got {embeds.dtype}")
    return embeds.reshape(-1, embeds.shape[-1]).to(torch.float32)


class TalkerComponent:
    name = "talker"
    nodes = ("talker", "talker_media")

    def __init__(self, engine: TalkerEngine) -> None:
        self.engine = engine
        self.runs: dict[str, TalkerRun] = {}

    @classmethod
    def from_checkpoint(cls, checkpoint: str, **engine_options) -> "TalkerComponent":
        return cls(TalkerEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, **engine_options)))

    def open(self, item: OpenNode, inputs) -> None:
        if item.node not in self.nodes:
            raise InvalidArgument(f"open.node {item.node!r}: the talker runs {list(self.nodes)}")
        if "prompt_ids" not in inputs or "prompt_embeds" not in inputs:
            raise InvalidArgument("open.inputs: the talker needs prompt_ids and prompt_embeds (thinker rows)")
        prompt = inputs["prompt_ids"]
        if prompt.dtype.is_floating_point or prompt.numel() == 0:
            raise InvalidArgument("open.inputs.prompt_ids must be non-empty integer ids")
        prompt_ids = prompt.reshape(-1).tolist()
        params = TalkerParams.from_params(item.params)
        room = self.engine.max_context - talker_prompt_len(prompt_ids, self.engine.spec.tokens)
        sampling = self.engine.talker_params(**params.sampling_kwargs(item.max_iters, room))  # the loop's own bound
        if item.pace is not None:
            self.engine.set_pace(item.request_id, item.pace)
        self.engine.add_request(item.request_id, prompt_ids, sampling, params.speaker,
                                image_grids=_grids(inputs.get("image_grids")))
        self.runs[item.request_id] = TalkerRun(item)
        try:
            set_videos(self.engine.requests[item.request_id], _grids(inputs.get("video_grids"), "video_grids"),
                       _seconds(inputs.get("video_seconds")))
            self._rows(item.request_id, inputs.get("prompt_embeds"), inputs.get("prompt_hidden"))
            if item.stream is None:  # whole-output handoff (the stage baseline): every row is here, the thinker is done
                if inputs.get("embeds") is not None:
                    self._rows(item.request_id, inputs["embeds"], inputs.get("hidden"))
                if item.request_id in self.engine.requests:
                    self.engine.end_thinker(item.request_id)
        except Exception:
            self.cancel(item.request_id)
            raise

    def push(self, item, tensors) -> None:
        if item.request_id not in self.runs:
            return  # the talker already stopped (codec EOS before the thinker's end): rows not needed
        if tensors:
            self._rows(item.request_id, tensors.get(item.port, tensors.get("embeds")), tensors.get("hidden"))
        if item.end_of_stream and item.request_id in self.engine.requests:
            self.engine.end_thinker(item.request_id)

    def push_rows(self, batch) -> dict:
        """A step's thinker rows for every open talker run in one call (runtime.row_batch):
        one check and one float32 conversion of the stacked rows [R, ..., thinker_hidden];
        each run copies its own rows. An entry fails alone."""
        rows = batch.rows
        try:
            flat = _as_rows(rows) if rows is not None else None  # [R * per_row, H]
        except InvalidArgument as e:
            return dict.fromkeys(range(len(batch)), e)
        per_row = flat.shape[0] // rows.shape[0] if rows is not None and rows.shape[0] else 1
        failures = {}
        for i, request_id in enumerate(batch.request_ids):
            if request_id not in self.runs:
                continue  # the talker already stopped (codec EOS before the thinker's end)
            try:
                if batch.stops[i] > batch.starts[i] and request_id in self.engine.requests:
                    self.engine.push_thinker(request_id, flat[batch.starts[i] * per_row:batch.stops[i] * per_row], None)
                if batch.ends[i] and request_id in self.engine.requests:
                    self.engine.end_thinker(request_id)
            except Exception as e:  # noqa: BLE001 - this request's rows alone
                failures[i] = e
        return failures

    def _rows(self, request_id: str, embeds, hidden) -> None:
        if embeds is None:
            raise InvalidArgument("thinker rows need embeddings [n, thinker_hidden]")
        embeds = _as_rows(embeds)
        if hidden is not None:
            hidden = hidden.reshape(-1, hidden.shape[-1]).to(torch.float32)
        if request_id in self.engine.requests:  # the talker may have finished before the thinker
            # no clone: the request copies rows into its own buffers (a pushed tensor may view
            # a read-only message buffer that does not outlive this call)
            self.engine.push_thinker(request_id, embeds, hidden)

    def cancel(self, request_id: str) -> None:
        self.runs.pop(request_id, None)
        self.engine.abort(request_id)

    def park(self, request_id: str, node: str, iteration: tuple[int, ...]) -> None:
        """The run's output credit is spent or its routed window is full: it sits steps
        out (keeping its KV) until resumed (runtime.backpressure)."""
        self.engine.park(request_id, CREDIT)  # a request that has finished holds nothing

    def resume(self, request_id: str, node: str, iteration: tuple[int, ...]) -> None:
        self.engine.unpark(request_id, CREDIT)

    def repace(self, request_id: str, origin_s: float) -> None:
        self.engine.repace(request_id, origin_s)

    def has_work(self) -> bool:
        return self.engine.has_work()

    def step(self) -> list:
        """The step's frames as one NodeOutputs per node (codes [N, G], a row per run that
        produced one), then the runs that ended."""
        frames: dict[str, tuple[list, list, list]] = {}  # node -> (request ids, iterations, frames)
        events = []
        for out in self.engine.step():
            run = self.runs.get(out.request_id)
            if run is None:
                continue
            item = run.item
            if out.frame is not None:
                rids, iterations, rows = frames.setdefault(item.node, ([], [], []))
                rids.append(item.request_id)
                iterations.append(item.iteration + (run.num_frames,))
                rows.append(out.frame)
                run.num_frames += 1
            if out.is_finished:
                del self.runs[out.request_id]
                if out.finish_reason == "no_text":
                    events.append(NodeError(item.request_id, item.node, "INVALID_ARGUMENT",
                                            "the thinker ended before its first text token: nothing to speak",
                                            item.iteration))
                else:
                    events.append(NodeDone(item.request_id, item.node, iteration=item.iteration))
        outputs = [NodeOutputs(node, tuple(rids), tuple(iterations), {"codes": torch.tensor(rows, dtype=torch.int64)})
                   for node, (rids, iterations, rows) in frames.items()]
        return outputs + events  # a run's last frame before its end

    def load(self) -> dict:
        return engine_load(self.engine)

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        for request_id in list(self.runs):
            self.cancel(request_id)
