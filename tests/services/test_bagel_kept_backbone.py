"""Kept BAGEL contexts on the backbone component: one released by its owner
(runtime.items.ContextOp, as a session's conductor sends it) frees its blocks, while
another owner's op, an unknown id and a cut back leave it as it was; an edit of a held
image (no ViT rows: the edit_held walk) needs a continued context that holds one."""
from __future__ import annotations

import pytest
import torch

from core.context_use import ContextUse, new_context_id
from core.errors import InvalidArgument, NotFound
from runtime.colocated import Colocated
from runtime.items import ContextOp, NodeError, NodeOutput, OpenNode
from services.bagel.component import BagelComponent
from tests.fixtures import tiny_bagel


@pytest.fixture(scope="module")
def component():
    return BagelComponent.from_checkpoint(tiny_bagel.checkpoint())


def _run(component, rid: str, node: str, inputs: dict, use: ContextUse) -> NodeOutput:
    component.open(OpenNode(rid, node, params={"max_new_tokens": 3}, contexts=(use,)), inputs)
    for _ in range(100):
        out = [e for e in component.step() if isinstance(e, NodeOutput) and e.node == node]
        if out:
            return out[0]
    raise AssertionError(f"{node} of {rid} did not end")


def _keep(component, rid: str, owner: str) -> str:
    use = ContextUse(keep_id=new_context_id(), owner=owner)
    prompt = {"prompt": torch.frombuffer(bytearray(b"remember this"), dtype=torch.uint8)}
    _run(component, rid, "prefill_chat", prompt, use)
    return _run(component, rid, "answer", {}, use).metadata["context_kept"]


def test_a_released_context_frees_its_blocks_and_cannot_be_continued(component):
    pool = component.table.kv.pool
    kept = _keep(component, "k1", "alice")
    held = pool.num_used_blocks
    assert held > 0 and component.table.kept.num_blocks == held
    for op, error in ((ContextOp(kept, "mallory"), NotFound), (ContextOp(new_context_id(), "alice"), NotFound),
                      (ContextOp(kept, "alice", keep_tokens=2), InvalidArgument)):
        with pytest.raises(error, match="params.context_id|keep_tokens"):
            component.context_op(op)
        assert pool.num_used_blocks == held  # nothing went
    Colocated([component]).context_op(ContextOp(kept, "alice"))  # as the step loop hands it over
    assert pool.num_used_blocks == 0 and len(component.table.kept) == 0
    prompt = {"prompt": torch.frombuffer(bytearray(b"and now?"), dtype=torch.uint8)}
    component.open(OpenNode("k2", "prefill_chat", params={}, contexts=(ContextUse(kept, "", "alice"),)), prompt)
    (error,) = [e for e in component.step() if isinstance(e, NodeError)]
    assert error.status == "NOT_FOUND" and "params.context_id" in error.message
    assert pool.num_used_blocks == 0


def test_an_edit_of_a_held_image_needs_a_context_that_holds_one(component):
    kept = _keep(component, "h1", "bob")  # a chat: its context holds no image
    latent = torch.zeros(1, 16, 4, 4)
    prompt = {"prompt": torch.frombuffer(bytearray(b"make it snowy"), dtype=torch.uint8), "latent": latent}
    for rid, uses in (("h2", (ContextUse(kept, "", "bob"),)), ("h3", ())):
        component.open(OpenNode(rid, "prefill_edit_held", params={}, contexts=uses), prompt)
        (error,) = [e for e in component.step() if isinstance(e, NodeError)]
        assert error.status == "INVALID_ARGUMENT" and "params.context_id" in error.message, error.message
    assert component.table.kv.pool.num_used_blocks == component.table.kept.num_blocks  # only the kept one
    component.context_op(ContextOp(kept, "bob"))
