"""Scheduling never changes audio: the same code2wav windows, opened in any order, under
either policy and any batch size limit (so batched with different neighbours), decode
to bit-identical audio per window."""
from __future__ import annotations

import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.pace import Pace
from engine.models.qwen3_omni.code2wav import Code2Wav
from engine.slack_policy import SlackPolicy
from engine.stateless_engine import StatelessConfig
from runtime.items import ChunkInfo, NodeOutput, OpenNode
from services.qwen3_omni.code2wav import Code2WavComponent

CODEBOOK, NUM_GROUPS = 64, 4
# (frames, context frames): first windows, growing chunks with left context, a last short one
WINDOWS = [(4, 0), (4, 0), (10, 4), (10, 4), (10, 4), (19, 9), (7, 3), (4, 0)]
_MODEL = []


@pytest.fixture(scope="module", autouse=True)
def model(tmp_path_factory):
    from engine.models.qwen3_omni.tiny import make_tiny_omni

    _MODEL[:] = [Code2Wav.from_checkpoint(make_tiny_omni(tmp_path_factory.mktemp("omni"), with_tokenizer=False))]


def _codes(frames: int, seed: int) -> torch.Tensor:  # [T, Q]
    return torch.randint(0, CODEBOOK, (frames, NUM_GROUPS), generator=torch.Generator().manual_seed(seed))


def _decode_all(order: list[int], offsets: list[float], kind: str, max_batch: int) -> dict[str, torch.Tensor]:
    codec = Code2WavComponent(_MODEL[0], StatelessConfig(max_batch_size=max_batch, policy=SlackPolicy(kind)))
    now = time.time()
    for i in order:
        frames, context = WINDOWS[i]
        item = OpenNode(f"r{i}", "code2wav", iteration=(0,), chunk=ChunkInfo(0, context) if context else None,
                        pace=Pace(now + offsets[i], 0.08))
        codec.open(item, {"codes": _codes(frames, seed=i)})
    audio = {}
    while codec.has_work():
        for ev in codec.step():
            if isinstance(ev, NodeOutput):
                audio[ev.request_id] = ev.tensors["audio"]
    return audio


@settings(max_examples=12, deadline=None)
@given(st.permutations(range(len(WINDOWS))), st.lists(st.floats(-2, 2), min_size=len(WINDOWS),
                                                       max_size=len(WINDOWS)),
       st.sampled_from(["deadline", "fcfs"]), st.sampled_from([1, 3, 8]))
def test_order_policy_and_batch_size_never_change_a_windows_audio(order, offsets, kind, max_batch):
    alone = _decode_all(list(range(len(WINDOWS))), [0.0] * len(WINDOWS), "fcfs", 1)
    got = _decode_all(order, offsets, kind, max_batch)
    assert got.keys() == alone.keys()
    for rid, wav in alone.items():
        assert torch.equal(got[rid], wav), rid
