"""SNAC on the codec service over a real Run stream: `serve codec` picks SNAC from an
Orpheus checkpoint; regular windows of several requests decode (in one batch) to the
package's audio with each window's own noise; the residual and out-of-range windows
answer without audio; a bad input is INVALID_ARGUMENT naming the field."""
from __future__ import annotations

import pytest
import torch

from engine.models.orpheus.windows import snac_levels, window_noise_seed
from runtime.items import ChunkInfo, NodeDone, NodeError, NodeOutput, OpenNode
from cluster.registry import hooks_for
from services.codec.factory import codec_from_checkpoint
from services.orpheus.codec import SnacComponent
from tests.fixtures import registry
from tests.fixtures.services import RunStream, start_in_process
from tests.fixtures.tiny_orpheus import checkpoint, snac_reference
from transport.codec import inline_ref, view

SEED = 5


@pytest.fixture(scope="module")
def codec():
    component = codec_from_checkpoint(checkpoint(), hooks=hooks_for("codec"))  # the Orpheus checkpoint: SNAC under snac/
    assert isinstance(component, SnacComponent)
    server = start_in_process(component)
    registry.register(server.address, server.hosted.transport.arena_name)
    yield server
    registry.unregister(server.address)
    server.stop()


def window(seed: int, n: int = 28) -> torch.Tensor:
    return torch.randint(1, 4096, (n,), generator=torch.Generator().manual_seed(seed))


def open_window(rid: str, codes: torch.Tensor, start: int, num_context: int, k: int = 0, codes_dtype=None) -> OpenNode:
    codes = codes if codes_dtype is None else codes.to(codes_dtype)
    return OpenNode(rid, "snac", iteration=(k,), inputs={"codes": inline_ref(codes)}, params={"seed": SEED},
                    chunk=ChunkInfo(start=start, num_context=num_context))


def run_all(codec, items) -> dict:
    """(request, iteration) -> "audio" tensor, None (no audio) or the NodeError."""
    out, ended = {}, set()
    with RunStream(codec.address) as stream:
        for item in items:
            stream.send(item)
        while len(ended) < len(items):
            for ev in stream.events(timeout_s=60):
                key = (ev.request_id, ev.iteration)
                if isinstance(ev, NodeOutput):
                    out[key] = audio(ev.tensors["audio"]) if "audio" in ev.tensors else None
                elif isinstance(ev, NodeError):
                    out[key] = ev
                    ended.add(key)
                elif isinstance(ev, NodeDone):
                    ended.add(key)
    return out


def audio(ref) -> torch.Tensor:
    """2048 float32 samples travel inline (below the shm threshold)."""
    return view(ref.location.data, ref.dtype, ref.shape).clone()


def reference(codes: torch.Tensor, end: int) -> torch.Tensor:
    model = snac_reference()  # built (its init draws from the RNG) before the seed is set
    torch.manual_seed(window_noise_seed(SEED, end))
    with torch.no_grad():
        return model.decode([x for x in snac_levels(codes[None])])[0, 0, 2048:4096]


def test_windows_of_several_requests_decode_to_the_package_audio(codec):
    items = [open_window("a", window(1), 0, 0), open_window("b", window(2), 7, 21, 1),
             open_window("c", window(3), 700, 21, 2)]
    out = run_all(codec, items)
    for item, seed, end in zip(items, (1, 2, 3), (28, 35, 728)):
        got = out[(item.request_id, item.iteration)]
        torch.testing.assert_close(got, reference(window(seed), end), atol=1e-5, rtol=0)


def test_residual_and_out_of_range_windows_emit_no_audio(codec):
    bad_high, bad_low = window(4).clone(), window(5).clone()
    bad_high[9], bad_low[0] = 4096, -1
    items = [open_window("residual", window(6), 3, 24), open_window("short", window(7, 21), 0, 0),
             open_window("high", bad_high, 0, 0), open_window("low", bad_low, 7, 21, 1)]
    out = run_all(codec, items)
    assert all(out[(i.request_id, i.iteration)] is None for i in items), out


@pytest.mark.parametrize("item, field", [
    (OpenNode("f", "snac", inputs={"codes": inline_ref(torch.zeros(28))}), "dtype"),
    (OpenNode("m", "snac", inputs={}), "codes"),
])
def test_bad_inputs_are_invalid_argument(codec, item, field):
    error = run_all(codec, [item])[(item.request_id, ())]
    assert isinstance(error, NodeError) and error.status == "INVALID_ARGUMENT" and field in error.message
