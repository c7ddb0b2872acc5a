"""A batch that would pass the message limit goes as several frames, never as one
oversized message: every entry arrives once, in order; an entry too large alone is
handed back (its request fails) and the shared stream stays up for the others."""
from __future__ import annotations

import asyncio

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from protos.starmesh.v1 import component_pb2
from runtime.items import NodeDone, NodeOutput, OpenNode
from runtime.message_split import split
from runtime.run_client import ComponentClient
from tests.fixtures.components import Echo
from tests.fixtures.services import describe, start_in_process, wait_until
from transport.codec import inline_ref, view
from transport.config import TransportConfig

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), max_size=30), limit=st.integers(64, 4000), sender=st.text(max_size=20))
def test_parts_stay_within_the_limit_and_keep_every_entry_in_order(sizes, limit, sender):
    msg = component_pb2.RunRequest(sender=sender)
    for i, n in enumerate(sizes):
        msg.items.add().cancel.request_id = f"{i}:" + "x" * n
    parts, oversized = split(msg, "items", limit)
    assert all(p.ByteSize() <= limit for p in parts) or parts == [msg]
    sent = [it.cancel.request_id for p in parts for it in p.items]
    kept = [it.cancel.request_id for i, it in enumerate(msg.items) if i not in oversized]
    assert sent == kept
    assert all(p.sender == sender for p in parts)
    for i in oversized:
        assert msg.items[i].ByteSize() + len(sender.encode()) > limit - 12  # only entries that cannot fit alone


@pytest.fixture(scope="module")
def small_limit_echo():
    """An echo service with a 4 MiB message limit whose outputs stay inline."""
    server = start_in_process(Echo(), transport_config=TransportConfig(host_id="test-host", inline_threshold=8 * MiB),
                              max_message_bytes=4 * MiB)
    yield server
    server.stop()


def _open(rid: str, num_bytes: int) -> OpenNode:
    return OpenNode(rid, "echo", inputs={"x": inline_ref(torch.full((num_bytes // 4,), float(len(rid))))})


def test_eight_requests_past_the_limit_together_all_finish_and_an_oversized_one_fails_alone(small_limit_echo):
    async def main():
        async with ComponentClient(small_limit_echo.address, max_message_bytes=4 * MiB) as client:
            items = [_open(f"r{i}", MiB) for i in range(8)] + [_open("huge", 5 * MiB)]
            refused = await client.send(items)  # ~13 MiB in one batch: several frames
            assert [i.request_id for i in refused] == ["huge"]
            outputs, done = {}, set()
            while len(done) < 8:
                for ev in await client.recv():
                    if isinstance(ev, NodeOutput):
                        ref = ev.tensors["x"]
                        outputs[ev.request_id] = view(ref.location.data, ref.dtype, ref.shape)
                    elif isinstance(ev, NodeDone):
                        done.add(ev.request_id)
            return outputs

    outputs = asyncio.run(main())
    assert sorted(outputs) == [f"r{i}" for i in range(8)]
    assert all(o.numel() == MiB // 4 and float(o[0]) == 2.0 for o in outputs.values())
    assert wait_until(lambda: describe(small_limit_echo.address).num_open_requests == 0, 30)
