"""What one request can cost the others, on a real deployment (bench.fuzz_mesh: a
`starmesh conductor` process with an API key; thinker, talker+codec and SD3 service
processes): 20 MB texts, a text at max_text_bytes and an image prompt at its byte bound,
sent while 8 speech and image requests stream, fail none of them (the 20 MB ones are
refused by their size, naming the field and the limit); 60 unauthenticated 20 MB
requests are refused and leave the conductor's memory flat; a NaN input_ids tensor and
a wrong dtype are INVALID_ARGUMENT naming the input, not INTERNAL."""
from __future__ import annotations

import asyncio
import math

import grpc
import pytest
import torch

from bench.chaos_front_door import KEY, OPTIONS, expensive_round, generate, unauth_flood
from bench.fuzz_mesh import FuzzMesh
from protos.starmesh.v1 import conductor_pb2 as pb
from tests.fixtures import tiny_orpheus, tiny_sd3, tiny_vjepa2
from transport.codec import inline_ref
from transport.ref_proto import ref_to_proto

pytestmark = pytest.mark.timeout(600)
RSS_BOUND_MB = 100  # the conductor's peak over the flood minus its resident memory before it


@pytest.fixture(scope="module")
def mesh(tiny_omni):
    checkpoints = {"omni": str(tiny_omni), "sd3": tiny_sd3.checkpoint(), "orpheus": tiny_orpheus.checkpoint(),
                   "vjepa2": tiny_vjepa2.checkpoint()}
    with FuzzMesh(checkpoints, api_key=KEY) as mesh:
        yield mesh


def test_expensive_requests_beside_live_ones_fail_none_of_them(mesh):
    result = asyncio.run(expensive_round(mesh.conductor, num_speech=6, num_image=2))
    assert len(result.live) == 8 and result.victims == [], result.victims
    outcomes = result.expensive
    for name in ("speech_20mb_text", "image_20mb_text"):
        status, details = outcomes[name]
        assert status == "INVALID_ARGUMENT" and details.startswith("text is 20971520 characters"), outcomes[name]
    assert "max_text_bytes" in outcomes["speech_20mb_text"][1]
    assert "the prompt input of model 'sd3'" in outcomes["image_20mb_text"][1]
    assert outcomes["text_at_max_text_bytes"][0] in ("OK", "INVALID_ARGUMENT"), outcomes
    assert outcomes["image_prompt_at_its_limit"] == ("OK", ""), outcomes
    assert all(mesh.alive().values()), mesh.alive()


def test_an_unauthenticated_flood_is_refused_and_leaves_memory_flat(mesh):
    flood = unauth_flood(mesh.conductor, mesh.pids()["conductor"], num=60, concurrency=12)
    assert flood["unauth_flood_statuses"] == {"UNAUTHENTICATED": 60}, flood
    assert flood["unauth_flood_rss_growth_mb"] <= RSS_BOUND_MB, flood


def _tensor_request(model: str, name: str, value: torch.Tensor) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model=model)
    ref_to_proto(inline_ref(value), req.inputs.add(name=name).tensor)
    req.params.update({"max_new_tokens": 2})
    return req


@pytest.mark.parametrize("model, name, value, words", [
    ("text", "input_ids", torch.full((6,), math.nan), ("inputs[input_ids] is float32", "integers")),
    ("qwen3-omni", "input_ids", torch.full((6,), math.inf, dtype=torch.float16), ("inputs[input_ids] is float16",)),
    ("text", "input_ids", torch.tensor([[1, 2, 3]]), ("inputs[input_ids] is int64 with shape [1, 3]", "1 dimension")),
    ("sd3", "prompt", torch.tensor([104, 105], dtype=torch.int32), ("inputs[prompt] is int32", "bytes (uint8)")),
])
def test_a_wrong_dtype_or_rank_is_invalid_argument_naming_the_input(mesh, model, name, value, words):
    async def call():
        async with grpc.aio.insecure_channel(mesh.conductor, options=OPTIONS) as channel:
            return await generate(channel, _tensor_request(model, name, value))

    status, details = asyncio.run(call())
    assert status == "INVALID_ARGUMENT", (status, details)
    for word in words:
        assert word in details, details
