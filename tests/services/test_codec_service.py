"""The codec (code2wav) as a real gRPC service: windows decode to decode_window's audio,
chunks of several requests are batched, bad windows are INVALID_ARGUMENT naming the
field and the service keeps serving."""
from __future__ import annotations

import pytest
import torch

from engine.models.qwen3_omni.code2wav import Code2Wav
from engine.stateless_engine import StatelessConfig
from services.qwen3_omni.code2wav import Code2WavComponent
from runtime.items import ChunkInfo, NodeDone, NodeError, NodeOutput, OpenNode
from cluster.registry import hooks_for, resolve_factory
from tests.fixtures import registry
from tests.fixtures.services import RunStream, copy_out, start_in_process
from transport.codec import inline_ref
from transport.config import TransportConfig
from core.errors import InvalidArgument
from transport.transport import Transport

pytestmark = pytest.mark.timeout(120)

CODEBOOK, NUM_GROUPS = 64, 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from engine.models.qwen3_omni.tiny import make_tiny_omni

    return Code2Wav.from_checkpoint(make_tiny_omni(tmp_path_factory.mktemp("omni"), with_tokenizer=False))


@pytest.fixture(scope="module")
def codec(model):
    """An in-process codec service sharing the module's model."""
    server = start_in_process(Code2WavComponent(model, StatelessConfig(max_batch_size=8)))
    registry.register(server.address, server.hosted.transport.arena_name)
    yield server
    registry.unregister(server.address)
    server.stop()


def codes(num_frames: int, seed: int) -> torch.Tensor:  # [T, Q]
    return torch.randint(0, CODEBOOK, (num_frames, NUM_GROUPS), generator=torch.Generator().manual_seed(seed))


def open_window(rid: str, window: torch.Tensor, num_context: int = 0, iteration=(0,)) -> OpenNode:
    chunk = ChunkInfo(start=0, num_context=num_context) if num_context else None
    return OpenNode(request_id=rid, node="code2wav", iteration=iteration, inputs={"codes": inline_ref(window)},
                    chunk=chunk)


def collect(stream: RunStream, num_runs: int, consumer: Transport, kinds: dict | None = None) -> tuple[dict, dict]:
    """(request_id -> audio, request_id -> NodeError) once num_runs runs have ended;
    audio is copied out of the service's arena and its lease released. `kinds` gets
    each audio reference's kind (inline, shm)."""
    audio, errors, done = {}, {}, set()
    kinds = {} if kinds is None else kinds
    while len(done) + len(errors) < num_runs:
        for ev in stream.events():
            if isinstance(ev, NodeOutput):
                ref = ev.tensors["audio"]
                audio[ev.request_id] = copy_out(stream, consumer, ev.request_id, ref)
                kinds[ev.request_id] = ref.kind
            elif isinstance(ev, NodeDone):
                done.add(ev.request_id)
            elif isinstance(ev, NodeError):
                errors[ev.request_id] = ev
    return audio, errors


@pytest.fixture
def consumer():
    transport = Transport(TransportConfig(host_id="test-host"))
    yield transport
    transport.close()


def test_registered_as_codec(tiny_omni):
    from services.codec.factory import codec_from_checkpoint

    assert resolve_factory("codec") == codec_from_checkpoint
    assert isinstance(codec_from_checkpoint(str(tiny_omni), hooks=hooks_for("codec")), Code2WavComponent)  # a Qwen3-Omni checkpoint: code2wav


def test_a_window_decodes_to_decode_window_audio(codec, model, consumer):
    window = codes(35, seed=1)  # 10 new frames after 25 of context: 73 KiB of audio, through the arena
    with RunStream(codec.address) as stream:
        stream.send(open_window("one", window, num_context=25, iteration=(3,)))
        kinds = {}
        audio, errors = collect(stream, 1, consumer, kinds)
    assert not errors and kinds == {"one": "shm"}
    want = model.decode_window(window, 25)
    assert audio["one"].dtype == torch.float32 and audio["one"].shape == want.shape == (10 * 1920 - 555,)
    assert torch.allclose(audio["one"], want, atol=1e-7)


def test_chunks_of_several_requests_are_batched_and_equal_solo(codec, model, consumer):
    engine = codec.hosted.component.engine
    items, steps = engine.num_items, engine.num_steps
    windows = {f"r{i}": (codes(8 if i % 2 else 6, seed=10 + i), i % 3) for i in range(6)}
    with RunStream(codec.address) as stream:
        stream.send(*[open_window(rid, w, n) for rid, (w, n) in windows.items()])
        audio, errors = collect(stream, len(windows), consumer)
    assert not errors and sorted(audio) == sorted(windows)
    assert engine.num_items - items == 6
    print(f"\n6 windows (3 of 6 frames, 3 of 8) ran in {engine.num_steps - steps} engine steps")
    assert engine.num_steps - steps < 6  # windows of equal length shared a forward
    for rid, (w, n) in windows.items():
        assert torch.allclose(audio[rid], model.decode_window(w, n), atol=1e-6), rid


BAD_WINDOWS = [
    ("groups", codes(4, 0)[:, :3], 0, "code groups"),
    ("too-high", codes(4, 0).index_fill(0, torch.tensor([2]), CODEBOOK), 0, "values must be in [0, 64)"),
    ("negative", codes(4, 0).index_fill(0, torch.tensor([1]), -1), 0, "values must be in"),
    ("empty", codes(0, 0), 0, "open.chunk.num_context"),
    ("all-context", codes(4, 0), 4, "open.chunk.num_context"),
    ("float", codes(4, 0).float(), 0, "dtype"),
    ("rank", codes(4, 0).reshape(-1), 0, "open.inputs[codes]"),
]


@pytest.mark.parametrize("rid,window,num_context,expected", BAD_WINDOWS, ids=[b[0] for b in BAD_WINDOWS])
def test_bad_windows_are_invalid_argument_and_the_service_keeps_serving(codec, model, consumer, rid, window,
                                                                       num_context, expected):
    with RunStream(codec.address) as stream:
        stream.send(open_window(rid, window, num_context))
        _, errors = collect(stream, 1, consumer)
        assert errors[rid].status == "INVALID_ARGUMENT" and expected in errors[rid].message, errors[rid].message
        good = codes(5, seed=3)
        stream.send(open_window("after", good, 1))
        audio, errors = collect(stream, 1, consumer)
    assert not errors and torch.allclose(audio["after"], model.decode_window(good, 1), atol=1e-7)


def test_cancel_drops_queued_windows_and_a_failing_window_fails_alone(model, monkeypatch):
    component = Code2WavComponent(model)
    for rid in ("keep", "drop", "bad"):
        component.open(open_window(rid, codes(3, seed=5)), {"codes": codes(3, seed=5)})
    component.cancel("drop")
    assert component.engine.num_queued == 2
    real = model.decode_windows

    def flaky(batch, num_context):  # fails any batch holding the window marked with code 63 in frame 0
        if (batch[:, 0, 0] == CODEBOOK - 1).any():
            raise InvalidArgument("flaky window")
        return real(batch, num_context)

    monkeypatch.setattr(model, "decode_windows", flaky)
    component.engine.queue[1].payload.codes[0, 0] = CODEBOOK - 1  # "bad"
    events = component.step()
    assert [(type(e).__name__, e.request_id) for e in events] == [
        ("NodeOutput", "keep"), ("NodeDone", "keep"), ("NodeError", "bad")]
    assert events[2].status == "INVALID_ARGUMENT" and "flaky window" in events[2].message
    assert all(e.iteration == (0,) for e in events)
    assert not component.has_work()
    with pytest.raises(InvalidArgument, match="open.node"):
        component.open(OpenNode(request_id="x", node="talker"), {})
    with pytest.raises(InvalidArgument, match="needs 'codes'"):
        component.open(OpenNode(request_id="x", node="code2wav"), {})


def test_code2wav_batches_windows_up_to_max_batch_frames(tmp_path):
    """Long windows run in small batches (a batch never holds the engine long), short first
    windows batch together; the audio of each window is the same as alone."""
    from engine.models.qwen3_omni.tiny import make_tiny_omni

    ckpt = make_tiny_omni(str(tmp_path / "omni"))
    codec = Code2WavComponent.from_checkpoint(str(ckpt), max_batch_frames=60)
    q, size = codec.model.config.num_quantizers, codec.model.config.codebook_size
    windows = {f"r{i}": torch.randint(0, size, (t, q), generator=torch.Generator().manual_seed(i))
               for i, t in enumerate([29, 29, 29, 4, 4, 4])}
    for rid, codes in windows.items():
        codec.open(OpenNode(rid, "code2wav"), {"codes": codes})
    sizes, audio = [], {}
    while codec.has_work():
        events = codec.step()
        outputs = [ev for ev in events if isinstance(ev, NodeOutput)]
        sizes.append(len(outputs))
        audio.update({ev.request_id: ev.tensors["audio"] for ev in outputs})
    assert sorted(sizes) == [1, 2, 3]  # 29+29 | 29 | 4+4+4
    for rid, codes in windows.items():
        assert torch.equal(audio[rid], codec.model.decode_window(codes))
    with pytest.raises(InvalidArgument, match="max_batch_frames"):
        Code2WavComponent.from_checkpoint(str(ckpt), max_batch_frames=0)


def test_a_burst_of_first_windows_decodes_in_one_step(tiny_omni):
    """The codec service's defaults (its factory, no options): 16 streams' 4-frame first
    windows (64 frames, the frames bound) run as one batch, so the last of them waits for
    no second batch; a 17th waits for the next step. Each window's audio is its own alone."""
    from services.codec.factory import codec_from_checkpoint

    codec = codec_from_checkpoint(str(tiny_omni), hooks=hooks_for("codec"))
    windows = {f"r{i}": codes(4, seed=i) for i in range(17)}
    for rid, window in windows.items():
        codec.open(OpenNode(rid, "code2wav"), {"codes": window})
    sizes, audio = [], {}
    while codec.has_work():
        outputs = [ev for ev in codec.step() if isinstance(ev, NodeOutput)]
        sizes.append(len(outputs))
        audio.update({ev.request_id: ev.tensors["audio"] for ev in outputs})
    assert sizes == [16, 1]
    for rid, window in windows.items():
        assert torch.equal(audio[rid], codec.model.decode_window(window))
