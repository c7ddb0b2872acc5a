"""The SDK's pure parts: a GenerateCall with tensors and media as the protobuf the
conductor reads, tensor events back as numpy arrays, ListModels as cards, and the
choice of a default model from them. No mesh: the wire messages are built and read here."""
from __future__ import annotations

import numpy as np
import pytest

from client.events import AudioChunk, RawTensor, TextDelta, event_from_proto
from client.generate_call import BadCall, GenerateCall, Media, Message
from client.model_card import ModelCard, cards_from_proto, pick_model
from client.tensors import array_of
from core.errors import InvalidArgument
from protos.starmesh.v1 import conductor_pb2 as pb


@pytest.mark.parametrize("array", [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]),
                                   np.arange(4, dtype=np.int64)[::2], np.array(7, dtype=np.uint8),
                                   np.zeros((0, 3), dtype=np.float16), np.arange(3, dtype=">i4")])
def test_numpy_inputs_travel_inline_and_come_back_equal(array):
    req = GenerateCall("m", inputs={"x": array}).to_proto()
    (named,) = req.inputs
    assert named.name == "x" and named.tensor.WhichOneof("location") == "inline_bytes"
    back = array_of(named)
    assert back.shape == array.shape and np.array_equal(back, array) and back.dtype == array.dtype.newbyteorder("=")


def test_torch_inputs_bfloat16_included_read_without_a_torch_import_in_the_client():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4).to(torch.bfloat16)
    named = GenerateCall("m", inputs={"x": x}).to_proto().inputs[0]
    assert named.tensor.dtype == 3  # DTYPE_BFLOAT16: sent as itself, not widened
    assert np.array_equal(array_of(named), x.float().numpy())  # widened on the way back, exactly


@pytest.mark.parametrize("inputs, words", [({"x": np.zeros(2)}, "inputs[x]: dtype float64"),
                                           ({"x": object()}, "inputs[x]"),
                                           ({"": np.zeros(2, np.float32)}, "inputs: ''")])
def test_a_bad_input_is_named(inputs, words):
    with pytest.raises(BadCall, match=words.replace("[", r"\[").replace("]", r"\]")) as e:
        GenerateCall("m", inputs=inputs)
    assert isinstance(e.value, InvalidArgument) and isinstance(e.value, ValueError)


def test_every_request_field_reaches_the_proto():
    call = GenerateCall("m", messages=(Message("user", (Media("image", b"png"), "what?")),), input_ids=(1, 2),
                        params={"seed": 3}, output_modalities=("text", "audio"), raw_outputs=("codes",),
                        request_id="r1")
    req = call.to_proto()
    assert (req.model, req.request_id, list(req.input_ids), list(req.raw_outputs)) == ("m", "r1", [1, 2], ["codes"])
    assert list(req.output_modalities) == [pb.MODALITY_TEXT, pb.MODALITY_AUDIO] and req.params["seed"] == 3
    parts = req.messages[0].content
    assert parts[0].image.data == b"png" and parts[1].text == "what?"
    with pytest.raises(ValueError, match=r"output_modalities\[0\] is 'codes'"):
        GenerateCall("m", output_modalities=("codes",))
    with pytest.raises(BadCall, match="model is empty"):
        GenerateCall("")


def test_events_parse_to_dataclasses_and_tensors_to_numpy():
    samples = np.array([0.5, -0.25], dtype="<f4")
    audio = event_from_proto(pb.GenerateEvent(audio=pb.AudioChunk(samples=samples.tobytes(), sample_rate=16000,
                                                                  num_samples=2)))
    assert isinstance(audio, AudioChunk) and audio.sample_rate == 16000 and np.array_equal(audio.array(), samples)
    text = event_from_proto(pb.GenerateEvent(text=pb.TextDelta(token_ids=[5], text="a")))
    assert text == TextDelta((5,), "a")
    ev = pb.GenerateEvent()
    ev.tensor.CopyFrom(GenerateCall("m", inputs={"codes": np.array([[1, 2]], np.int64)}).to_proto().inputs[0])
    raw = event_from_proto(ev)
    assert isinstance(raw, RawTensor) and raw.name == "codes" and raw.value.tolist() == [[1, 2]]


def test_a_tensor_by_reference_is_refused_naming_it():
    ev = pb.GenerateEvent()
    ev.tensor.name = "big"
    ev.tensor.tensor.dtype, ev.tensor.tensor.shape[:] = 1, [2]
    ev.tensor.tensor.shm.arena, ev.tensor.tensor.shm.nbytes = "a", 8
    with pytest.raises(InvalidArgument, match=r"event.tensor\[big\]: arrived by shm"):
        event_from_proto(ev)


def _reply() -> pb.ListModelsResponse:
    reply = pb.ListModelsResponse()
    talk = reply.models.add(name="talk", accepts_text=True, sample_rate=22050, voice_param="speaker",
                            voices=["a"], output_modalities=[pb.MODALITY_TEXT, pb.MODALITY_AUDIO])
    talk.outputs.add(name="codes", kind="codes", event="tensor")
    reply.models.add(name="paint", accepts_text=True, output_modalities=[pb.MODALITY_IMAGE])
    world = reply.models.add(name="world", inputs=["actions", "frames", "goal"])
    world.outputs.add(name="prediction", event="tensor")
    return reply


def test_cards_carry_what_a_client_needs_in_the_conductors_order():
    cards = cards_from_proto(_reply())
    assert list(cards) == ["talk", "paint", "world"]
    talk = cards["talk"]
    assert talk.sample_rate == 22050 and talk.output_kind("codes") == "codes" and talk.makes("audio")
    assert cards["world"].takes(["frames", "actions"]) and cards["world"].gives(["prediction"])


def test_the_default_model_is_the_first_that_fits_else_the_flag_is_named():
    cards = cards_from_proto(_reply())
    assert pick_model(cards, makes="image").name == "paint"
    assert pick_model(cards, takes={"frames": 0, "actions": 0}, gives=("prediction",)).name == "world"
    with pytest.raises(InvalidArgument, match=r"--model: no served model gives \['score'\] \(served: "):
        pick_model(cards, gives=("score",), field_name="--model")
    assert ModelCard("m", (), False, (), "", {}, 0).outputs == {}  # the older positional form still builds
