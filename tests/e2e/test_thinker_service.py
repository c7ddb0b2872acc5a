"""The thinker as a real service behind the conductor: generation equals the
in-process engine, bad input is INVALID_ARGUMENT and the service keeps serving."""
import asyncio

import grpc
import pytest
import torch

from conductor.model import ServedModel
from conductor.placement import Placement
from conductor.service import ConductorService
from pipelines.text_generation import DECODE_LOOP, text_generation_graph
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from tests.fixtures import registry
from tests.fixtures.services import describe, wait_until
from transport.codec import view

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    from engine.checkpoints.tiny_text import make_tiny

    ckpt = str(tmp_path_factory.mktemp("qwen3"))
    make_tiny("qwen3", ckpt)
    proc = ServiceProcess("thinker", ["--checkpoint", ckpt], name="thinker").start()
    registry.register(proc.address, describe(proc.address).arena)
    placement = Placement.from_dict({
        "services": {"thinker": {"replicas": [proc.address]}},
        "placement": {"prefill": "thinker", "decode": "thinker"},
        "kv_contexts": {"thinker": ["prefill", "decode"]}})
    server = BackgroundServer(ConductorService([ServedModel("tiny", text_generation_graph(), placement,
                                                            {DECODE_LOOP})]))
    server.start()
    yield server, proc, ckpt
    server.stop()
    registry.unregister(proc.address)
    proc.stop()


def generate(address: str, prompts: list[list[int]], max_new_tokens: int, **params) -> list:
    async def main():
        async with grpc.aio.insecure_channel(address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(i, prompt):
                req = pb.GenerateRequest(model="tiny", request_id=f"g{i}", input_ids=prompt)
                req.params.update({"max_new_tokens": max_new_tokens, "ignore_eos": True, **params})
                try:
                    return [int(view(ev.tensor.tensor.inline_bytes, "int64", tuple(ev.tensor.tensor.shape))[0])
                            async for ev in stub.Generate(req) if ev.WhichOneof("kind") == "tensor"]
                except grpc.aio.AioRpcError as e:
                    return e

            return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))

    return asyncio.run(main())


def offline(ckpt: str, prompts, max_new_tokens: int) -> list[list[int]]:
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt))
    return [engine.generate([p], SamplingParams(max_new_tokens=max_new_tokens))[0] for p in prompts]


def test_generation_through_the_mesh_equals_the_engine_alone(thinker):
    server, _, ckpt = thinker
    prompts = [[5, 9, 13], [7] * 11, list(range(20, 45)), [3]]
    got = generate(server.address, prompts, max_new_tokens=12)
    assert got == offline(ckpt, prompts, 12)


def test_bad_input_is_invalid_argument_and_others_still_run(thinker):
    server, proc, _ = thinker
    got = generate(server.address, [[1, 2, 3], [10**6], [4, 5, 6]], max_new_tokens=4)
    assert isinstance(got[1], grpc.aio.AioRpcError) and got[1].code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "vocab" in got[1].details()
    assert len(got[0]) == len(got[2]) == 4
    bad = generate(server.address, [[1, 2]], max_new_tokens=0)[0]
    assert isinstance(bad, grpc.aio.AioRpcError) and bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert wait_until(lambda: describe(proc.address).num_open_requests == 0, 5.0)
