"""The shared media encoder (Qwen3-Omni's towers through its encoder hook) as one real
gRPC service shared by two models' requests: a request's media parts in prompt order
in, every part's rows out in the same order (equal to the in-process towers), parts of
both streams batched into one forward per tower, bad media INVALID_ARGUMENT naming the
part and the service serving on; without a model hook that knows the checkpoint there is
no encoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cluster.registry import build_component, resolve_factory
from core.errors import InvalidArgument
from engine.models.qwen3_omni.encoder_loader import load_audio_encoder, load_vision_encoder
from engine.models.qwen3_omni.media_features import MediaFeatures
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode
from services.encoder.component import encoders_from_checkpoint
from services.encoder.media_list import pack_media, unpack_encoded
from tests.engine.models.test_omni_media import png_bytes, sine, wav_bytes
from tests.fixtures import registry
from tests.fixtures.services import RunStream, copy_out, start_in_process
from tests.pipelines.test_omni_video import gif_bytes
from transport.codec import inline_ref
from transport.config import TransportConfig
from transport.transport import Transport

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def service(tiny_omni):
    server = start_in_process(build_component("encoder", checkpoint=str(tiny_omni)))
    registry.register(server.address, server.hosted.transport.arena_name)
    yield server
    registry.unregister(server.address)
    server.stop()


@pytest.fixture
def consumer():
    transport = Transport(TransportConfig(host_id="test-host"))
    yield transport
    transport.close()


def _open(rid: str, *parts: tuple[str, bytes]) -> OpenNode:
    inputs = {name: inline_ref(t) for name, t in pack_media(list(parts)).items()}
    return OpenNode(request_id=rid, node="media_encoder", iteration=(0,), inputs=inputs)


def _collect(stream: RunStream, num_runs: int, consumer: Transport) -> tuple[dict, dict]:
    """request id -> [(kind, EncodedPart)] of its outputs; request id -> NodeError."""
    outputs, errors, done = {}, {}, set()
    while len(done) + len(errors) < num_runs:
        for ev in stream.events():
            if isinstance(ev, NodeOutput):
                tensors = {port: copy_out(stream, consumer, ev.request_id, ref) for port, ref in ev.tensors.items()}
                outputs[ev.request_id] = unpack_encoded(tensors)
            elif isinstance(ev, NodeDone):
                done.add(ev.request_id)
            elif isinstance(ev, NodeError):
                errors[ev.request_id] = ev
    return outputs, errors


@pytest.fixture(scope="module")
def solo(tiny_omni):
    """Each part's rows from the towers in-process, one part at a time."""
    features = MediaFeatures.from_checkpoint(tiny_omni)
    audio_tower, vision_tower = load_audio_encoder(tiny_omni), load_vision_encoder(tiny_omni)

    def encode(kind: str, data: bytes):
        if kind == "audio":
            return audio_tower([features.audio(data, "audio")])[0], None, None
        pixels, grid, *_ = features.video(data, "video") if kind == "video" else features.image(data, "image")
        out = vision_tower(pixels, [grid])
        return out.embeds[0], torch.stack(out.deepstack[0]), grid
    return encode


def test_registered_as_encoder():
    assert resolve_factory("encoder") == encoders_from_checkpoint


def test_two_models_share_one_batched_encoder(service, solo, consumer):
    clips = {f"a{i}": wav_bytes(sine(200 + 50 * i, 1.0 + i, 16000)) for i in range(4)}
    images = {f"i{i}": png_bytes(64 + 32 * i, 96, seed=i) for i in range(4)}
    audio = service.hosted.component.towers["audio"]
    forwards, run = [], audio.run
    audio.run = lambda payloads: (forwards.append(len(payloads)), run(payloads))[1]
    try:
        with RunStream(service.address) as model_a, RunStream(service.address) as model_b:
            model_a.send(*[_open(f"A-{rid}", ("audio", d)) for rid, d in clips.items()],
                         *[_open(f"A-{rid}", ("image", d)) for rid, d in images.items()])
            model_b.send(*[_open(f"B-{rid}", ("audio", d)) for rid, d in clips.items()])
            out_a, err_a = _collect(model_a, 8, consumer)
            out_b, err_b = _collect(model_b, 4, consumer)
    finally:
        del audio.run
    assert not err_a and not err_b
    assert sum(forwards) == 8 and len(forwards) < 8  # both models' clips shared forwards
    for rid, data in clips.items():
        want, _, _ = solo("audio", data)
        torch.testing.assert_close(out_a[f"A-{rid}"][0][1].rows, want, atol=1e-5, rtol=0)
        torch.testing.assert_close(out_b[f"B-{rid}"][0][1].rows, want, atol=1e-5, rtol=0)
    for rid, data in images.items():
        embeds, deepstack, grid = solo("image", data)
        (kind, got), = out_a[f"A-{rid}"]
        assert kind == "image" and got.grid == grid
        torch.testing.assert_close(got.rows, embeds, atol=1e-5, rtol=0)
        torch.testing.assert_close(got.deepstack, deepstack, atol=1e-5, rtol=0)


def test_parts_of_any_kinds_come_back_in_prompt_order(service, solo, consumer):
    parts = [("image", png_bytes(56, 42, seed=1)), ("audio", wav_bytes(sine(220, 1.0, 16000))),
             ("video", gif_bytes(6)), ("image", png_bytes(28, 28, seed=3))]
    with RunStream(service.address) as stream:
        stream.send(_open("mixed", *parts))
        outputs, errors = _collect(stream, 1, consumer)
    assert not errors
    got = outputs["mixed"]
    assert [kind for kind, _ in got] == ["image", "audio", "video", "image"]
    for (kind, data), (_, part) in zip(parts, got):
        rows, deepstack, grid = solo(kind, data)
        torch.testing.assert_close(part.rows, rows, atol=1e-5, rtol=0)
        if kind != "audio":
            assert part.grid == grid
            torch.testing.assert_close(part.deepstack, deepstack, atol=1e-5, rtol=0)
    assert got[2][1].seconds > 0 and got[0][1].seconds == got[1][1].seconds == 0  # a video's time step


BAD = [("not-wav", [("audio", b"OggS" + bytes(100))], "open.inputs[audio]: unsupported audio format"),
       ("empty-wav", [("audio", wav_bytes(np.zeros(0, np.float32)))], "no audio samples"),
       ("corrupt-png", [("image", png_bytes(32, 32)[:100])], "corrupt"),
       ("text", [("image", b"hello" * 20)], "not a readable image"),
       ("second-image", [("image", png_bytes(32, 32)), ("audio", wav_bytes(sine(300, 0.5, 16000))),
                         ("image", b"hello" * 20)], "open.inputs[image][1]: not a readable image")]


@pytest.mark.parametrize("rid,parts,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_media_is_invalid_argument_and_the_service_serves_on(service, consumer, rid, parts, expected):
    with RunStream(service.address) as stream:
        stream.send(_open(rid, *parts))
        _, errors = _collect(stream, 1, consumer)
        assert errors[rid].status == "INVALID_ARGUMENT", errors[rid].message
        assert expected in errors[rid].message and "open.inputs[" in errors[rid].message
        stream.send(_open("after", ("audio", wav_bytes(sine(300, 0.5, 16000)))))
        outputs, errors = _collect(stream, 1, consumer)
    assert not errors and outputs["after"][0][1].rows.shape[1] == 64


def test_a_bad_manifest_is_named(service, consumer):
    media = pack_media([("audio", wav_bytes(sine(300, 0.5, 16000)))])
    media["media_parts"][0, 1] += 1  # one byte more than media holds
    item = OpenNode(request_id="bad", node="media_encoder", iteration=(0,),
                    inputs={name: inline_ref(t) for name, t in media.items()})
    with RunStream(service.address) as stream:
        stream.send(item)
        _, errors = _collect(stream, 1, consumer)
    assert errors["bad"].status == "INVALID_ARGUMENT" and "open.inputs[media_parts]" in errors["bad"].message


def test_a_checkpoint_no_hook_knows_has_no_encoder(tiny_omni):
    with pytest.raises(InvalidArgument, match=r"no registered model's encoder hook recognises it \(expected media towers"):
        encoders_from_checkpoint(str(tiny_omni))  # no hooks given
    with pytest.raises(InvalidArgument, match="towers 'ears'"):
        build_component("encoder", checkpoint=str(tiny_omni), towers="ears")
