"""The hot path on a plain block stack: bitwise equal to resident execution, two slots
only, prefetch without misses, stale slots and placeholder use fail fast, disable()."""
from __future__ import annotations

import pytest
import torch

from engine.offload import OffloadBackend, OffloadConfig, StaleSlotError
from engine.offload.memory import param_bytes, storages, weight_bytes
from tests.engine.offload.stack import Stack, inputs

ON = OffloadConfig(enabled=True)


def resident_outputs(num_forwards: int = 3, **kw) -> list[torch.Tensor]:
    model = Stack(**kw)
    return [model(inputs(seed)) for seed in range(num_forwards)]


def test_outputs_are_bitwise_equal_and_every_block_is_prefetched():
    expected = resident_outputs()
    model = Stack()
    backend = OffloadBackend.enable(model, ON)
    got = [model(inputs(seed)) for seed in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    stats = backend.stats
    assert stats.blocks_run == 15 and stats.misses == 0
    assert stats.fills == 16  # block 0 primed, then one prefetch per block (the last prefetches block 0)
    backend.check_integrity()
    backend.disable()


def test_only_two_slots_hold_streamed_weights_during_a_forward():
    model = Stack()
    resident = param_bytes(model.embed) + param_bytes(model.head)
    backend = OffloadBackend.enable(model, ON)
    slots = storages(backend.slot_tensors())
    assert len(slots) == 2 and set(slots.values()) == {backend.plan.slot_bytes}
    seen = []

    def measure(module, args, output):
        live = storages(p for p in module.parameters())
        assert set(live) <= set(slots), "a streamed parameter lives outside the two slots"
        seen.append(weight_bytes(model, backend))

    for block in model.blocks:
        block.register_forward_hook(measure)  # runs while the block's parameters are slot views
    model(inputs())
    assert len(seen) == 5 and max(seen) <= 2 * backend.plan.slot_bytes + resident
    assert weight_bytes(model, backend) == 2 * backend.plan.slot_bytes + resident
    backend.disable()


def test_resident_layers_stay_put_and_the_rest_streams():
    expected = resident_outputs()
    model = Stack()
    backend = OffloadBackend.enable(model, OffloadConfig(enabled=True, resident_layers=2))
    assert backend.plan.resident_blocks == ("blocks.0", "blocks.1")
    assert [b.path for b in backend.plan.blocks] == ["blocks.2", "blocks.3", "blocks.4"]
    assert model.blocks[0].fc1.weight.numel() > 0 and model.blocks[2].fc1.weight.numel() == 0
    assert all(torch.equal(a, model(inputs(s))) for s, a in enumerate(expected))
    backend.disable()


def test_a_forward_that_stops_early_makes_the_next_one_miss_not_fail():
    model, reference = Stack(), Stack()
    backend = OffloadBackend.enable(model, ON)
    assert torch.equal(model(inputs(), num_blocks=2), reference(inputs(), num_blocks=2))
    assert torch.equal(model(inputs(2)), reference(inputs(2)))  # block 0 is in neither slot: a miss
    assert backend.stats.misses == 1
    backend.disable()


def test_an_error_inside_a_block_releases_its_slot():
    model, reference = Stack(), Stack()
    backend = OffloadBackend.enable(model, ON)
    with pytest.raises(RuntimeError):
        model(torch.zeros(4, 5))  # wrong width: embed fails before any block
    bad = torch.zeros(4, 24)
    with pytest.raises(RuntimeError):
        model.blocks[0](bad[:, :5])  # fails inside block 0's forward
    backend.check_integrity()
    assert torch.equal(model(inputs()), reference(inputs()))
    backend.disable()


def test_a_slot_refilled_while_its_block_computes_fails_fast():
    model = Stack()
    backend = OffloadBackend.enable(model, ON)
    streamer = backend.streamer
    forward = model.blocks[1].forward

    def clobber(x):
        streamer._fill(streamer._active.slot, 3)  # a bug that overwrites the slot in use
        return forward(x)

    model.blocks[1].forward = clobber
    with pytest.raises(StaleSlotError, match="blocks.1"):
        model(inputs())
    backend.disable()


def test_streamed_parameters_outside_their_block_fail_fast():
    model = Stack()
    backend = OffloadBackend.enable(model, ON)
    with pytest.raises(RuntimeError):
        model.blocks[2].fc1(torch.zeros(1, 24))  # a submodule called around its block's hooks
    backend.disable()


def test_disable_restores_or_leaves_placeholders():
    expected = resident_outputs(1)[0]
    model = Stack()
    backend = OffloadBackend.enable(model, ON)
    model(inputs(0))
    backend.disable(restore=True)
    assert torch.equal(model(inputs(0)), expected)  # no hooks, ordinary parameters again
    model = Stack()
    backend = OffloadBackend.enable(model, ON)
    backend.disable()
    assert model.blocks[0].fc1.weight.numel() == 0 and not model.blocks[0]._forward_pre_hooks


def test_chunked_transfer_and_a_group_of_one_are_plain_rank_local_copies():
    expected = resident_outputs(2)
    model = Stack()
    backend = OffloadBackend.enable(model, OffloadConfig(enabled=True, use_allgather=True, transfer_chunk_bytes=100))
    assert backend.transfer.kind == "rank_local"  # no process group: a group of one, no collective
    assert all(torch.equal(a, model(inputs(s))) for s, a in enumerate(expected))
    backend.disable()
