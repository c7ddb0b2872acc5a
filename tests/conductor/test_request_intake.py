"""The front door's parsing (conductor.request_intake, conductor.prompt_size): text is
bounded by its size before anything tokenizes it (a 20 MB text is refused naming the
field and the limit, and the tokenizer never sees it); chat templates and tokenization
run on the intake's workers, never on the event loop; past max_waiting a request is
refused with RESOURCE_EXHAUSTED and a retry hint; a cancelled call leaves the queue; a
worker's refusal leaves no reference cycle (which would hold the request until a
garbage collection)."""
from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from cluster.registry import build_model
from conductor.input_limits import InputLimits
from conductor.placement import Placement
from conductor.request_intake import IntakeConfig, RequestIntake
from core.errors import InvalidArgument, Overloaded
from engine.models.qwen3_omni.tiny import chat_prompt
from protos.starmesh.v1 import conductor_pb2 as pb

WAIT_S = 30.0  # only a hung test reaches it


class Watched:
    """The real tokenizer, noting the thread of each chat-template call; while `gate` is
    set to an unset Event, each call waits for it (a worker held busy)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.threads: list[int] = []
        self.entered = threading.Semaphore(0)
        self.gate: threading.Event | None = None

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def apply_chat_template(self, *args, **kwargs):
        self.threads.append(threading.get_ident())
        self.entered.release()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S)
        return self.tokenizer.apply_chat_template(*args, **kwargs)


@pytest.fixture(scope="module")
def models():
    def placement(nodes, **extra):
        return Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}},
                                    "placement": {n: "s" for n in nodes}, **extra})

    kv = {"kv_contexts": {"s": ["prefill", "decode"]}}
    return {"text": build_model("qwen3", "text", placement(["prefill", "decode"], **kv), {}),
            "sd3": build_model("sd3", "sd3", placement(["clip_l", "clip_g", "t5", "join_text", "init_latent",
                                                        "decode", "denoise_loop"]), {"fused": True})}


def _message(text: str, parts: int = 1) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model="text")
    turn = req.messages.add(role="user")
    for _ in range(parts):
        turn.content.add(text=text)
    return req


def test_a_20mb_text_is_refused_by_its_size_before_any_tokenization(models, tokenizer):
    watched, intake = Watched(tokenizer), RequestIntake(InputLimits())
    try:
        with pytest.raises(InvalidArgument) as e:
            asyncio.run(intake.parse(pb.GenerateRequest(model="text", text="x" * (20 << 20)), models["text"], watched))
    finally:
        intake.close()
    assert "text is 20971520 characters" in str(e.value) and "2097152" in str(e.value)
    assert "max_text_bytes" in str(e.value)
    assert watched.threads == []  # the tokenizer never saw it


@pytest.mark.parametrize("req, words", [
    (pb.GenerateRequest(model="text", text="é" * 600), ("text is 1200 bytes (UTF-8)", "1000", "max_text_bytes")),
    (_message("ab" * 100, parts=6), ("messages is 1200 characters", "max_text_bytes")),
    (_message("a", parts=11), ("11 content parts", "max_parts")),
])
def test_text_is_bounded_by_characters_then_bytes_and_parts_by_count(models, tokenizer, req, words):
    intake = RequestIntake(InputLimits(max_text_bytes=1000, max_parts=10))
    try:
        with pytest.raises(InvalidArgument) as e:
            asyncio.run(intake.parse(req, models["text"], tokenizer))
    finally:
        intake.close()
    for word in words:
        assert word in str(e.value), str(e.value)


def test_an_image_prompt_is_refused_past_its_own_limit_on_the_loop(models):
    intake = RequestIntake(InputLimits())
    try:
        with pytest.raises(InvalidArgument, match="the prompt input of model 'sd3'"):
            asyncio.run(intake.parse(pb.GenerateRequest(model="sd3", text="y" * (1 << 20)), models["sd3"]))
        assert intake.waiting == 0  # refused by its size: no worker was taken
    finally:
        intake.close()


def test_chat_templates_run_on_the_intake_workers_not_the_event_loop(models, tokenizer):
    watched, intake = Watched(tokenizer), RequestIntake(InputLimits(), IntakeConfig(workers=2))

    async def main():
        loop_thread = threading.get_ident()
        parsed = await asyncio.gather(*(intake.parse(pb.GenerateRequest(model="text", text=t), models["text"], watched)
                                        for t in ("Hello there", "hi")))
        return loop_thread, parsed

    try:
        loop_thread, parsed = asyncio.run(main())
    finally:
        intake.close()
    assert [p.inputs["input_ids"][0].tolist() for p in parsed] == [chat_prompt("Hello there"), chat_prompt("hi")]
    assert len(watched.threads) == 2 and loop_thread not in watched.threads


def test_past_max_waiting_a_request_is_refused_with_a_retry_hint_and_a_cancelled_one_leaves(models, tokenizer):
    watched, intake = Watched(tokenizer), RequestIntake(InputLimits(), IntakeConfig(workers=1, max_waiting=2))
    watched.gate = threading.Event()
    req = pb.GenerateRequest(model="text", text="Hello there")

    async def main():
        busy = asyncio.create_task(intake.parse(req, models["text"], watched))  # holds the one worker
        assert await asyncio.to_thread(watched.entered.acquire, True, WAIT_S)
        queued = asyncio.create_task(intake.parse(req, models["text"], watched))  # waits for the worker
        await asyncio.sleep(0)
        assert intake.waiting == 2
        with pytest.raises(Overloaded) as e:
            await intake.parse(req, models["text"], watched)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        watched.gate.set()
        parsed = await busy
        return e.value, parsed

    try:
        refusal, parsed = asyncio.run(main())
    finally:
        watched.gate.set()
        intake.close()
    assert refusal.status == "RESOURCE_EXHAUSTED" and refusal.retry_after_ms > 0 and "max_waiting" in str(refusal)
    assert parsed.inputs["input_ids"][0].tolist() == chat_prompt("Hello there")
    assert len(watched.threads) == 1  # the cancelled one never ran
    assert intake.waiting == 0


def test_requests_with_only_a_few_ids_are_parsed_without_a_worker(models):
    intake = RequestIntake(InputLimits(), IntakeConfig(workers=1))
    intake.close()  # no worker can run now: a parse that needed one would fail
    parsed = asyncio.run(intake.parse(pb.GenerateRequest(model="text", input_ids=[1, 2, 3]), models["text"]))
    assert parsed.inputs["input_ids"][0].tolist() == [1, 2, 3]


def test_requests_with_small_named_inputs_are_parsed_without_a_worker_and_large_ones_with_one(models):
    intake = RequestIntake(InputLimits(), IntakeConfig(workers=1, inline_bytes=1024))
    intake.close()  # no worker can run now: a parse that needs one fails to schedule

    def named(nbytes: int) -> pb.GenerateRequest:
        req = pb.GenerateRequest(model="sd3")
        ref = req.inputs.add(name="prompt").tensor
        ref.dtype, ref.inline_bytes = 99, b"x" * nbytes  # refused by name wherever it is parsed
        return req

    with pytest.raises(InvalidArgument, match=r"inputs\[prompt\].*dtype"):
        asyncio.run(intake.parse(named(100), models["sd3"]))
    with pytest.raises(RuntimeError, match="shutdown"):
        asyncio.run(intake.parse(named(2000), models["sd3"]))


def test_a_refusal_from_a_worker_leaves_no_reference_cycle(models):
    over = pb.GenerateRequest(model="sd3", text="x" * 100)
    over.inputs.add(name="prompt").tensor.dtype = 99  # refused in the worker, naming the dtype
    intake = RequestIntake(InputLimits())

    async def refused_thrice() -> list[tuple[str, int]]:
        out = []
        for _ in range(3):
            gc.collect()
            gc.disable()
            try:
                await intake.parse(over, models["sd3"])
            except InvalidArgument as e:  # not pytest.raises: its ExceptionInfo keeps the traceback
                out.append((str(e).split(".")[0], gc.collect()))
            finally:
                gc.enable()
        return out

    try:
        assert asyncio.run(refused_thrice()) == [("inputs[prompt]", 0)] * 3
    finally:
        intake.close()


def test_intake_config_is_validated():
    with pytest.raises(ValueError, match="intake.workers"):
        IntakeConfig(workers=0)
