"""The front door's checks (conductor.generate_request): every field a client sets is
bounded by InputLimits and every refusal is InvalidArgument naming the field and the
limit; ids travel at their narrowest integer width."""
from __future__ import annotations

import math

import pytest
import torch
from google.protobuf import struct_pb2

from conductor.generate_request import parse_generate_request, served_model
from conductor.input_limits import InputLimits
from conductor.placement import Placement
from core.errors import InvalidArgument
from cluster.registry import build_model
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import tensor_pb2

LIMITS = InputLimits(max_input_bytes=1024, max_request_bytes=2048, max_input_ids=100, max_inputs=3, max_rank=4,
                     max_params_bytes=512, max_name_len=32, max_outputs=2)
IMAGE_NODES = ["clip_l", "clip_g", "t5", "join_text", "init_latent", "decode", "denoise_loop"]


def _placement(nodes) -> Placement:
    return Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}}, "placement": {n: "s" for n in nodes}})


@pytest.fixture(scope="module")
def models():
    return {"text": build_model("qwen3", "text", _placement(["prefill", "decode"]), {}),
            "sd3": build_model("sd3", "sd3", _placement(IMAGE_NODES), {"fused": True})}


def _uint8(name: str, nbytes: int, shape=None) -> tensor_pb2.NamedTensor:
    ref = tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_UINT8, shape=shape or [nbytes], inline_bytes=bytes(nbytes))
    return tensor_pb2.NamedTensor(name=name, tensor=ref)


def _refused(models, req, *words):
    with pytest.raises(InvalidArgument) as e:
        parse_generate_request(req, models[req.model], LIMITS)
    for word in words:
        assert word in str(e.value), str(e.value)
    return str(e.value)


@pytest.mark.parametrize("ids, dtype", [([1, 2, 255], torch.uint8), ([0, 256], torch.int16),
                                        ([151_643, 7], torch.int32), ([1 << 40], torch.int64)])
def test_ids_travel_at_the_narrowest_width_that_holds_them(models, ids, dtype):
    parsed = parse_generate_request(pb.GenerateRequest(model="text", input_ids=ids), models["text"], LIMITS)
    (tensor,) = parsed.inputs["input_ids"]
    assert tensor.dtype == dtype and tensor.tolist() == ids


def test_ids_are_bounded_by_count_and_sign(models):
    _refused(models, pb.GenerateRequest(model="text", input_ids=[1] * 101), "input_ids", "101", "max_input_ids")
    _refused(models, pb.GenerateRequest(model="text", input_ids=[3, -1]), "input_ids[1]", "-1")


def test_tensors_are_bounded_by_bytes_rank_and_count_and_named_once(models):
    req = pb.GenerateRequest(model="sd3", inputs=[_uint8("prompt", 1025)])
    _refused(models, req, "inputs[prompt]", "1025", "max_input_bytes")
    _refused(models, pb.GenerateRequest(model="sd3", inputs=[_uint8("p", 1, [1] * 5)]), "inputs[p].shape", "max_rank")
    _refused(models, pb.GenerateRequest(model="sd3", inputs=[_uint8(f"p{i}", 1) for i in range(4)]), "max_inputs")
    req = pb.GenerateRequest(model="sd3", inputs=[_uint8("prompt", 1), _uint8("prompt", 1)])
    _refused(models, req, "inputs[prompt]", "twice")
    req = pb.GenerateRequest(model="text", input_ids=[1], inputs=[_uint8("input_ids", 1)])
    _refused(models, req, "inputs[input_ids]", "also sent as input_ids")
    huge = tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_UINT8, shape=[0, 1 << 40, 1 << 40], inline_bytes=b"")
    _refused(models, pb.GenerateRequest(model="sd3", inputs=[tensor_pb2.NamedTensor(name="p", tensor=huge)]),
             "inputs[p]", "2^62")


def test_the_request_as_a_whole_is_bounded(models):
    req = pb.GenerateRequest(model="sd3", inputs=[_uint8("prompt", 1000)], text="x" * 1100)
    _refused(models, req, "request", "max_request_bytes")


def test_names_and_ids_are_bounded_and_echoed_short(models):
    message = str(pytest.raises(InvalidArgument, served_model, models, "m" * 100_000).value)
    assert len(message) < 300 and "100000 characters" in message
    _refused(models, pb.GenerateRequest(model="text", request_id="r" * 33), "request_id", "max_name_len")
    _refused(models, pb.GenerateRequest(model="text", request_id="a\nb"), "request_id", "printable")
    _refused(models, pb.GenerateRequest(model="text", raw_outputs=["a", "b", "c"]), "raw_outputs", "max_outputs")


def test_wanted_outputs_are_outputs_and_modalities_of_the_model(models):
    _refused(models, pb.GenerateRequest(model="text", raw_outputs=["token", "audio"]), "raw_outputs[1]", "'audio'",
             "first_token")
    _refused(models, pb.GenerateRequest(model="text", output_modalities=[pb.MODALITY_IMAGE]),
             "output_modalities[0]", "image", "['text']")
    _refused(models, pb.GenerateRequest(model="text", output_modalities=[pb.MODALITY_UNSPECIFIED]),
             "output_modalities[0]")
    req = pb.GenerateRequest(model="sd3", output_modalities=[pb.MODALITY_IMAGE], raw_outputs=["step"])
    wanted = parse_generate_request(req, models["sd3"], LIMITS).wanted
    assert wanted.modalities == {"image"} and wanted.raw == {"step"}


@pytest.mark.parametrize("params, words", [
    ({"seed": 1e30}, ("params.seed", "64-bit")),
    ({"guidance": math.nan}, ("params.guidance", "finite")),
    ({"steps": math.inf}, ("params.steps",)),
    ({"steps": "2"}, ("params.steps", "integer")),
    ({"bogus": 1.0}, ("params.bogus", "not a parameter")),
    ({"negative_prompt": "x" * 1000}, ("params", "max_params_bytes")),
])
def test_bad_params_are_named(models, params, words):
    req = pb.GenerateRequest(model="sd3")
    req.params.update(params)
    _refused(models, req, *words)


def test_a_struct_value_with_nothing_set_is_named(models):
    req = pb.GenerateRequest(model="sd3")
    req.params.fields["steps"].CopyFrom(struct_pb2.Value())
    _refused(models, req, "params.steps", "no value")


def test_limits_are_validated_naming_the_field():
    with pytest.raises(ValueError, match="input_limits.max_inputs"):
        InputLimits(max_inputs=0)
    with pytest.raises(ValueError, match="max_input_bytes"):
        InputLimits(max_input_bytes=2, max_request_bytes=1)


def test_a_client_cannot_name_memory_of_the_mesh(models):
    """A service's arena name (Describe hands it out) in a client's input is refused: the
    conductor gives clients no arena, so no shared-memory reference is theirs."""
    shm = tensor_pb2.ShmLocation(arena="starmesh-0123456789abcdef", lease_id=1, offset=0, nbytes=4, host_id="h")
    ref = tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_UINT8, shape=[4], shm=shm)
    req = pb.GenerateRequest(model="sd3", inputs=[tensor_pb2.NamedTensor(name="prompt", tensor=ref)])
    _refused(models, req, "inputs[prompt].tensor", "shm reference", "inline")


def test_usage_counts_prompt_ids_sent_as_ids_or_as_a_client_tensor():
    """input_ids parsed by the conductor are a tensor; a client may also send a tensor
    named input_ids (a TensorRef, whose numel is a property): both count (fuzz-found)."""
    from conductor.service import _num_ids
    from transport.codec import inline_ref

    assert _num_ids({"input_ids": (torch.zeros(4, dtype=torch.int32),)}) == 4
    assert _num_ids({"input_ids": (inline_ref(torch.zeros(3)),)}) == 3
    assert _num_ids({}) == 0


def test_a_tensor_is_bounded_by_its_dtype_and_shape_before_its_bytes_are_read(models):
    """A float32 [512] claims 2048 bytes, past the 1024 limit: refused by that, whatever
    its inline bytes hold (here none), so an oversized tensor is never copied out."""
    claim = tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_FLOAT32, shape=[512], inline_bytes=b"")
    req = pb.GenerateRequest(model="sd3", inputs=[tensor_pb2.NamedTensor(name="prompt_embeds", tensor=claim)])
    _refused(models, req, "inputs[prompt_embeds] is 2048 bytes", "max_input_bytes")
