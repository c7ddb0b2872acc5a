"""The audio and vision encoders as one real gRPC service shared by two models' requests:
raw WAV/PNG bytes in, the towers' rows out (equal to the in-process towers), requests of
both streams batched into one forward, bad media INVALID_ARGUMENT naming the field and
the service serving on."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.models.qwen3_omni.encoder_loader import load_audio_encoder, load_vision_encoder
from engine.models.qwen3_omni.media_features import MediaFeatures
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode
from services.encoder.component import encoders_from_checkpoint
from cluster.registry import resolve_factory
from tests.engine.models.test_omni_media import png_bytes, sine, wav_bytes
from tests.fixtures import registry
from tests.fixtures.services import RunStream, copy_out, start_in_process
from transport.codec import inline_ref
from transport.config import TransportConfig
from transport.transport import Transport

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def service(tiny_omni):
    server = start_in_process(encoders_from_checkpoint(str(tiny_omni)))
    registry.register(server.address, server.hosted.transport.arena_name)
    yield server
    registry.unregister(server.address)
    server.stop()


@pytest.fixture
def consumer():
    transport = Transport(TransportConfig(host_id="test-host"))
    yield transport
    transport.close()


def _open(rid: str, node: str, data: bytes) -> OpenNode:
    port = "audio" if node == "audio_encoder" else "image"
    return OpenNode(request_id=rid, node=node, iteration=(0,),
                    inputs={port: inline_ref(torch.frombuffer(bytearray(data), dtype=torch.uint8))})


def _collect(stream: RunStream, num_runs: int, consumer: Transport) -> tuple[dict, dict]:
    outputs, errors, done = {}, {}, set()
    while len(done) + len(errors) < num_runs:
        for ev in stream.events():
            if isinstance(ev, NodeOutput):
                outputs[ev.request_id] = {port: copy_out(stream, consumer, ev.request_id, ref)
                                          for port, ref in ev.tensors.items()}
            elif isinstance(ev, NodeDone):
                done.add(ev.request_id)
            elif isinstance(ev, NodeError):
                errors[ev.request_id] = ev
    return outputs, errors


def test_registered_as_encoder():
    assert resolve_factory("encoder") == encoders_from_checkpoint


def test_two_models_share_one_batched_encoder(service, tiny_omni, consumer):
    features = MediaFeatures.from_checkpoint(tiny_omni)
    audio_tower, vision_tower = load_audio_encoder(tiny_omni), load_vision_encoder(tiny_omni)
    clips = {f"a{i}": wav_bytes(sine(200 + 50 * i, 1.0 + i, 16000)) for i in range(4)}
    images = {f"i{i}": png_bytes(64 + 32 * i, 96, seed=i) for i in range(4)}
    audio_engine = service.hosted.component.components[0].engine
    steps = audio_engine.num_steps
    with RunStream(service.address) as model_a, RunStream(service.address) as model_b:
        model_a.send(*[_open(f"A-{rid}", "audio_encoder", d) for rid, d in clips.items()],
                     *[_open(f"A-{rid}", "vision_encoder", d) for rid, d in images.items()])
        model_b.send(*[_open(f"B-{rid}", "audio_encoder", d) for rid, d in clips.items()])
        out_a, err_a = _collect(model_a, 8, consumer)
        out_b, err_b = _collect(model_b, 4, consumer)
    assert not err_a and not err_b
    assert audio_engine.num_steps - steps < 8  # both models' clips shared forwards
    for rid, data in clips.items():
        want = audio_tower([features.audio(data, "audio")])[0]
        torch.testing.assert_close(out_a[f"A-{rid}"]["embeds"], want, atol=1e-5, rtol=0)
        torch.testing.assert_close(out_b[f"B-{rid}"]["embeds"], want, atol=1e-5, rtol=0)
    for rid, data in images.items():
        pixels, grid = features.image(data, "image")
        want = vision_tower(pixels, [grid])
        got = out_a[f"A-{rid}"]
        assert tuple(got["grid"].tolist()) == grid
        torch.testing.assert_close(got["embeds"], want.embeds[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(got["deepstack"], torch.stack(want.deepstack[0]), atol=1e-5, rtol=0)


BAD = [("not-wav", "audio_encoder", b"OggS" + bytes(100), "unsupported audio format"),
       ("empty-wav", "audio_encoder", wav_bytes(np.zeros(0, np.float32)), "no audio samples"),
       ("corrupt-png", "vision_encoder", png_bytes(32, 32)[:100], "corrupt"),
       ("text", "vision_encoder", b"hello" * 20, "not a readable image")]


@pytest.mark.parametrize("rid,node,data,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_media_is_invalid_argument_and_the_service_serves_on(service, consumer, rid, node, data, expected):
    with RunStream(service.address) as stream:
        stream.send(_open(rid, node, data))
        _, errors = _collect(stream, 1, consumer)
        assert errors[rid].status == "INVALID_ARGUMENT", errors[rid].message
        assert expected in errors[rid].message and "open.inputs[" in errors[rid].message
        stream.send(_open("after", "audio_encoder", wav_bytes(sine(300, 0.5, 16000))))
        outputs, errors = _collect(stream, 1, consumer)
    assert not errors and outputs["after"]["embeds"].shape[1] == 64
