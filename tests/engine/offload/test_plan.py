"""Discovery and the plan: the block stacks of every engine model, declared plans,
resident layers, the digest, and what cannot stream."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.models.loader import load_model
from engine.models.qwen3_omni import THINKER_PART
from engine.models.qwen3_omni.code2wav import Code2Wav
from engine.offload.plan import ALIGN, build_plan, discover_blocks
from engine.models.qwen3_omni.talker_loader import load_talker
from tests.engine.offload.stack import Stack
from core.errors import InvalidArgument


def test_engine_models_stream_their_block_stacks(tiny_omni):
    thinker = load_model(tiny_omni, text_part=THINKER_PART)
    talker, code2wav = load_talker(tiny_omni), Code2Wav.from_checkpoint(tiny_omni)
    assert discover_blocks(thinker) == ["model.layers.0", "model.layers.1"]
    assert discover_blocks(talker) == ["model.layers.0", "model.layers.1"]  # not code_predictor's smaller stack
    assert discover_blocks(code2wav) == ["pre_transformer.layers.0", "pre_transformer.layers.1",
                                         "decoder.1", "decoder.2", "decoder.3", "decoder.4"]  # declared
    plan = build_plan(code2wav)
    assert plan.slot_bytes == max(b.nbytes for b in plan.blocks) + (-max(b.nbytes for b in plan.blocks) % ALIGN)


def test_discovery_picks_the_largest_stack_of_one_block_class():
    assert discover_blocks(Stack()) == [f"blocks.{i}" for i in range(5)]

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.small = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
            self.big = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))
            self.mixed = nn.ModuleList([nn.Linear(64, 64), nn.LayerNorm(64)])  # two classes: not a stack

    assert discover_blocks(Mixed()) == ["big.0", "big.1"]
    with pytest.raises(InvalidArgument, match="declare offload_blocks"):
        discover_blocks(nn.Sequential(nn.Linear(2, 2)))


def test_layout_offsets_are_aligned_and_cover_every_parameter():
    model = Stack()
    plan = build_plan(model, resident_layers=1)
    assert [b.path for b in plan.blocks] == ["blocks.1", "blocks.2", "blocks.3", "blocks.4"]
    block = plan.blocks[0]
    assert [p.name for p in block.params] == [f"blocks.1.{n}" for n, _ in model.blocks[1].named_parameters()]
    assert all(p.offset % ALIGN == 0 for p in block.params)
    assert all(a.offset + a.nbytes <= b.offset for a, b in zip(block.params, block.params[1:]))
    with pytest.raises(InvalidArgument, match="resident_layers \\(5\\) must be less than"):
        build_plan(model, resident_layers=5)


def test_the_digest_is_the_layout():
    assert build_plan(Stack(seed=0)).digest == build_plan(Stack(seed=1)).digest  # weights do not matter
    assert build_plan(Stack()).digest != build_plan(Stack(hidden=38)).digest
    assert build_plan(Stack()).digest != build_plan(Stack(), resident_layers=1).digest


def test_tied_streamed_weights_cannot_stream():
    model = Stack()
    model.head.weight = nn.Parameter(torch.zeros(3, 24))
    model.blocks[1].fc2.weight = model.blocks[0].fc2.weight
    with pytest.raises(InvalidArgument, match="tied"):
        build_plan(model)
