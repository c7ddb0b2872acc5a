"""The BAGEL backbone component batches concurrent requests: their answers decode together
(one forward per token step over every decode in flight, services/bagel/decodes.py) and
prefills queued together put each request's i-th input in one forward
(engine/models/bagel/extend_batch.py); each request's ids and K/V equal those it gets
alone (the in-process runner's ids)."""
from __future__ import annotations

import pytest
import torch

from engine.models.bagel.params import BagelParams
from pipelines.bagel.runner import BagelRunner
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode
from services.bagel.component import BagelComponent
from services.bagel.vit_tower import encoder_hook
from services.encoder.media_list import pack_encoded
from tests.e2e.bagel_mesh import png
from tests.fixtures import tiny_bagel
from tests.pipelines.bagel_cases import image, load_parts

# (prompt, max_new_tokens): prompts of different lengths, answers of different bounds
CASES = [("hi", 3), ("a red fox in the snow at dawn", 7), ("what is it?", 1), ("describe a quiet lake", 5)]


@pytest.fixture(scope="module")
def setup():
    directory = tiny_bagel.checkpoint()
    return BagelComponent.from_checkpoint(directory), BagelRunner(load_parts(directory))


def _prompt(text: str) -> dict:
    return {"prompt": torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8)}


def _until(component, done, limit: int = 1000) -> list:
    """Steps the component until done(events so far) holds; -> the events."""
    events = []
    for _ in range(limit):
        events += component.step()
        if done(events):
            return events
    raise AssertionError(f"not done after {limit} steps: {events}")


def _outputs(events, node: str) -> dict[str, dict]:
    return {e.request_id: e.tensors for e in events if isinstance(e, NodeOutput) and e.node == node}


def _prefill(component, cases, tag: str) -> None:
    for i, (prompt, n) in enumerate(cases):
        component.open(OpenNode(f"{tag}{i}", "prefill_chat", params={"max_new_tokens": n}), _prompt(prompt))
    _until(component, lambda ev: len(_outputs(ev, "prefill_chat")) == len(cases))


def _steps_of(ids: list[int], bound: int) -> int:
    """Forwards a decode takes: one per id, and one more that met the end id."""
    return len(ids) + (len(ids) < bound)


def test_concurrent_answers_decode_together_and_equal_each_alone(setup):
    component, runner = setup
    _prefill(component, CASES, "c")
    before = component.decodes.num_steps
    for i, (_, n) in enumerate(CASES):
        component.open(OpenNode(f"c{i}", "answer", params={"max_new_tokens": n}), {})
    events = _until(component, lambda ev: len(_outputs(ev, "answer")) == len(CASES))
    answers = _outputs(events, "answer")
    alone = [runner.run([p], BagelParams(max_new_tokens=n), want_image=False).text_ids for p, n in CASES]
    assert [answers[f"c{i}"]["text"].tolist() for i in range(len(CASES))] == alone
    assert sum(map(len, alone)) > len(CASES)  # the answers have ids to compare
    # one forward per token step over all of them: as many as the longest decode takes
    assert component.decodes.num_steps - before == max(_steps_of(a, n) for a, (_, n) in zip(alone, CASES))
    assert {e.request_id for e in events if isinstance(e, NodeDone) and e.node == "answer"} == set(answers)
    assert not component.table.requests and component.table.kv.pool.num_used_blocks == 0


def test_a_request_joins_decodes_in_flight_and_a_cancelled_one_leaves_them(setup):
    component, runner = setup
    first, late = ("a red fox in the snow at dawn", 8), ("hi", 4)
    _prefill(component, [first, late, ("gone", 8)], "j")
    component.open(OpenNode("j0", "answer", params={"max_new_tokens": first[1]}), {})
    component.open(OpenNode("j2", "answer", params={"max_new_tokens": 8}), {})
    component.step()
    component.cancel("j2")  # its decode goes with its contexts; the others go on
    component.open(OpenNode("j1", "answer", params={"max_new_tokens": late[1]}), {})
    events = _until(component, lambda ev: len(_outputs(ev, "answer")) == 2)
    answers = _outputs(events, "answer")
    for rid, (prompt, n) in (("j0", first), ("j1", late)):
        assert answers[rid]["text"].tolist() == runner.run([prompt], BagelParams(max_new_tokens=n),
                                                          want_image=False).text_ids
    assert "j2" not in answers and not component.decodes.runs
    assert component.table.kv.pool.num_used_blocks == 0


def _understand(tower, specs, tag: str) -> list:
    """prefill_und payloads of (picture, prompt) pairs, the ViT rows from the encoder's tower."""
    for i, (picture, prompt) in enumerate(specs):
        part = tower.run([tower.prepare("image", png(picture), "open.inputs[image]")])
        yield OpenNode(f"{tag}{i}", "prefill_und", params={"max_new_tokens": 4}), {**_prompt(prompt),
                                                                                  **pack_encoded(["image"], part)}


def test_prefills_queued_together_put_each_input_of_every_request_in_one_forward(setup):
    component, runner = setup
    tower = encoder_hook(tiny_bagel.checkpoint()).towers["vision"]("float32", "cpu")
    specs = [(image(50, 40, 1), "what is it?"), (image(30, 60, 2), "describe this image in detail please"),
             (image(40, 40, 3), "and this?")]
    kv = component.table.kv
    opened = list(_understand(tower, specs, "p"))
    key, _ = component.prepare(*opened[0])
    payloads = [component.prepare(item, inputs)[1] for item, inputs in opened]
    before = kv.num_forwards
    component.run(key, payloads)
    assert kv.num_forwards - before == 2  # every image in one forward, every prompt in the next
    batched = [kv.rows_kv((f"p{i}", "gen")) for i in range(len(specs))]
    for i in range(len(specs)):
        component.cancel(f"p{i}")
    for i, (item, inputs) in enumerate(opened):  # the same prefill alone
        component.run(key, [component.prepare(item, inputs)[1]])
        torch.testing.assert_close(kv.rows_kv((f"p{i}", "gen")), batched[i], atol=1e-5, rtol=1e-5)
        component.open(OpenNode(f"p{i}", "answer", params={"max_new_tokens": 4}), {})
        events = _until(component, lambda ev: bool(_outputs(ev, "answer")))
        picture, prompt = specs[i]
        ref = runner.run([picture, prompt], BagelParams(max_new_tokens=4), want_image=False)
        assert _outputs(events, "answer")[f"p{i}"]["text"].tolist() == ref.text_ids
    assert kv.pool.num_used_blocks == 0


def test_an_answer_for_a_request_without_contexts_fails_at_open(setup):
    component, _ = setup
    with pytest.raises(Exception, match="no contexts on this replica"):
        component.open(OpenNode("nobody", "answer", params={}), {})
    assert not component.decodes.runs
    assert not [e for e in component.step() if isinstance(e, NodeError)]
