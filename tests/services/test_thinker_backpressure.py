"""The thinker honours its runtime's backpressure: a decode run the step loop parks (its
output credit spent, or its routed window full) sits steps out, keeping its KV, while
other requests decode on; the engine's own unpark (its decode loop opening) does not
resume a run the service holds; resume does, and the tokens are the same as unheld."""
from __future__ import annotations

import pytest
import torch

from engine.kv_pool import IntegrityError
from runtime.items import NodeDone, NodeOutput, OpenNode
from services.thinker.component import ThinkerComponent

PARAMS = {"max_new_tokens": 8.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from engine.checkpoints.tiny_text import make_tiny

    return str(make_tiny("qwen3", tmp_path_factory.mktemp("ckpt") / "tiny", num_hidden_layers=1))


def _open(thinker: ThinkerComponent, request_id: str, prompt: list[int]) -> None:
    thinker.open(OpenNode(request_id, "prefill", params=PARAMS), {"input_ids": torch.tensor(prompt)})


def _step(thinker: ThinkerComponent, tokens: dict, done: set) -> None:
    for ev in thinker.step():
        if ev.node == "prefill" and isinstance(ev, NodeDone):
            thinker.open(OpenNode(ev.request_id, "decode"), {})
        elif ev.node == "decode" and isinstance(ev, NodeOutput):
            tokens.setdefault(ev.request_id, []).append(int(ev.tensors["token"]))
        elif ev.node == "decode" and isinstance(ev, NodeDone):
            done.add(ev.request_id)


def _alone(checkpoint: str, prompt: list[int]) -> list[int]:
    thinker = ThinkerComponent.from_checkpoint(checkpoint, num_blocks=32)
    tokens, done = {}, set()
    _open(thinker, "r", prompt)
    while "r" not in done:
        _step(thinker, tokens, done)
    return tokens["r"]


def test_a_parked_decode_waits_while_others_decode_and_resumes_with_the_same_tokens(checkpoint):
    thinker = ThinkerComponent.from_checkpoint(checkpoint, num_blocks=32)
    tokens, done = {}, set()
    _open(thinker, "held", [3, 1, 4, 1, 5])
    thinker.park("held", "prefill", ())  # before its decode opens: the open must not resume it
    _open(thinker, "free", [2, 7, 1, 8])
    for _ in range(100):
        if "free" in done:
            break
        _step(thinker, tokens, done)
        thinker.engine.check_integrity()
    assert "free" in done and len(tokens["free"]) == 7
    assert "held" not in tokens  # its first token ended prefill; no decode step ran
    assert thinker.engine.holds == {"held": {"credit"}}

    thinker.resume("held", "decode", ())
    while "held" not in done:
        _step(thinker, tokens, done)
    assert tokens["held"] == _alone(checkpoint, [3, 1, 4, 1, 5])
    assert tokens["free"] == _alone(checkpoint, [2, 7, 1, 8])
    assert thinker.engine.holds == {}
    thinker.engine.check_integrity()


def test_the_integrity_check_catches_a_held_request_that_runs(checkpoint):
    thinker = ThinkerComponent.from_checkpoint(checkpoint, num_blocks=32)
    _open(thinker, "r", [3, 1, 4])
    thinker.park("r", "prefill", ())
    thinker.engine.check_integrity()
    thinker.engine.scheduler.unpark("r")  # behind the hold's back
    with pytest.raises(IntegrityError, match="held for"):
        thinker.engine.check_integrity()


def test_a_park_after_the_last_output_holds_nothing(checkpoint):
    """The step loop parks a run whose last output spent the credit; it has finished."""
    thinker = ThinkerComponent.from_checkpoint(checkpoint, num_blocks=32)
    tokens, done = {}, set()
    _open(thinker, "r", [3, 1, 4])
    while "r" not in done:
        _step(thinker, tokens, done)
    thinker.park("r", "decode", ())
    assert thinker.engine.holds == {}
    thinker.resume("r", "decode", ())
    thinker.engine.check_integrity()
