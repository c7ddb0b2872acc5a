"""Each model's inputs as its pipeline declares them (core.input_spec), checked at the
front door: a named tensor of the wrong dtype or rank, negative ids, or a name the model
does not take is INVALID_ARGUMENT naming the input; every served pipeline declares every
walk input it has."""
from __future__ import annotations

import math

import pytest
import torch

from cluster.registry import build_model
from conductor.generate_request import parse_generate_request
from conductor.input_limits import InputLimits
from conductor.input_check import check_input
from conductor.model import ServedModel
from conductor.placement import Placement
from core.errors import GraphError, InvalidArgument
from core.input_spec import InputSpec
from engine.models.sd3.params import MAX_PROMPT_BYTES
from protos.starmesh.v1 import conductor_pb2 as pb
from transport.codec import inline_ref
from transport.ref_proto import ref_to_proto

LIMITS = InputLimits()
NODES = {
    "qwen3": (["prefill", "decode"], {"kv_contexts": {"s": ["prefill", "decode"]}}, {}),
    "qwen3-omni": (["prefill", "decode", "talker", "code2wav", "media_encoder"],
                   {"kv_contexts": {"s": ["prefill", "decode"]}}, {}),
    "orpheus": (["prefill", "decode", "codes", "snac"], {"kv_contexts": {"s": ["prefill", "decode"]}}, {}),
    "sd3": (["clip_l", "clip_g", "t5", "join_text", "init_latent", "decode", "denoise_loop"], {}, {"fused": True}),
    "vjepa2-ac": (["encode", "encode_goal", "prefill", "rollout", "plan"], {}, {}),
    "toy-tagger": (["tag"], {}, {}),
}


def _model(pipeline: str) -> ServedModel:
    nodes, extra, options = NODES[pipeline]
    placement = Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}},
                                     "placement": {n: "s" for n in nodes}, **extra})
    return build_model(pipeline, pipeline, placement, options)


@pytest.fixture(scope="module")
def models():
    return {name: _model(name) for name in NODES}


def _request(model: str, **tensors) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model=model)
    for name, value in tensors.items():
        ref_to_proto(inline_ref(value), req.inputs.add(name=name).tensor)
    return req


def _refused(models, req, *words) -> str:
    with pytest.raises(InvalidArgument) as e:
        parse_generate_request(req, models[req.model], LIMITS)
    for word in words:
        assert word in str(e.value), str(e.value)
    return str(e.value)


@pytest.mark.parametrize("pipeline", sorted(NODES))
def test_every_pipeline_declares_every_walk_input(models, pipeline):
    model = models[pipeline]
    assert set(model.input_specs) == set(model.input_names), pipeline


def test_ids_full_of_nan_are_refused_naming_the_input_and_its_dtype(models):
    nan_ids = torch.full((5,), math.nan, dtype=torch.float32)
    _refused(models, _request("qwen3", input_ids=nan_ids), "inputs[input_ids]", "float32", "integers")
    _refused(models, _request("qwen3-omni", input_ids=nan_ids), "inputs[input_ids]", "float32")


def test_negative_ids_are_refused_naming_the_position(models):
    _refused(models, _request("qwen3", input_ids=torch.tensor([3, 7, -5], dtype=torch.int32)),
             "inputs[input_ids][2] is -5", ">= 0")


@pytest.mark.parametrize("name, value, words", [
    ("prompt", torch.zeros(4, dtype=torch.int64), ("inputs[prompt]", "int64", "bytes (uint8)")),
    ("prompt_embeds", torch.zeros(1, 4, dtype=torch.float32), ("inputs[prompt_embeds]", "3 dimensions")),
    ("pooled_prompt_embeds", torch.zeros(1, 4, dtype=torch.int32), ("inputs[pooled_prompt_embeds]", "int32")),
])
def test_a_wrong_dtype_or_rank_is_refused_naming_the_input(models, name, value, words):
    _refused(models, _request("sd3", **{name: value}), *words)


def test_a_world_input_of_the_wrong_kind_is_refused(models):
    frames = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    _refused(models, _request("vjepa2-ac", frames=frames), "inputs[frames]", "uint8", "floating")
    _refused(models, _request("vjepa2-ac", actions=torch.zeros(3)), "inputs[actions]", "2 dimensions")


def test_a_name_the_model_does_not_take_is_refused(models):
    _refused(models, _request("sd3", latent=torch.zeros(4)), "inputs[latent]", "not an input of model 'sd3'",
             "prompt_embeds")
    _refused(models, pb.GenerateRequest(model="sd3", input_ids=[1, 2]), "input_ids", "takes no input_ids")


def test_an_image_prompt_is_bounded_by_its_own_byte_limit(models):
    over = torch.zeros(MAX_PROMPT_BYTES + 1, dtype=torch.uint8)
    _refused(models, _request("sd3", prompt=over), "inputs[prompt]", str(MAX_PROMPT_BYTES + 1), str(MAX_PROMPT_BYTES))
    _refused(models, pb.GenerateRequest(model="sd3", text="x" * (MAX_PROMPT_BYTES + 1)), "text",
             str(MAX_PROMPT_BYTES), "the prompt input of model 'sd3'")


def test_what_a_model_declares_is_accepted(models):
    parsed = parse_generate_request(_request("qwen3", input_ids=torch.tensor([1, 2, 3], dtype=torch.int16)),
                                    models["qwen3"], LIMITS)
    assert parsed.inputs["input_ids"][0].dtype == "int16"
    embeds = {"prompt_embeds": torch.zeros(1, 4, 8), "negative_prompt_embeds": torch.zeros(1, 4, 8),
              "pooled_prompt_embeds": torch.zeros(1, 6), "negative_pooled_prompt_embeds": torch.zeros(1, 6)}
    assert set(parse_generate_request(_request("sd3", **embeds), models["sd3"], LIMITS).inputs) == set(embeds)


def test_specs_are_validated():
    with pytest.raises(ValueError, match="InputSpec.kind"):
        InputSpec("text", 1)
    with pytest.raises(ValueError, match="InputSpec.rank"):
        InputSpec("ids", -1)
    model = _model("qwen3")
    with pytest.raises(GraphError, match="input_specs\\['bogus'\\] is not an input"):
        ServedModel(model.name, model.graph, model.placement, model.inner_loops,
                    input_specs={"bogus": InputSpec("ids", 1)})
    check_input(InputSpec("bytes", 1), "inputs[x]", inline_ref(torch.zeros(3, dtype=torch.uint8)), "m")  # accepted
