"""Ownership on a replica's Run streams: a stream acts only on requests it opened. A
Cancel, Credit or Release for another stream's request is refused (PERMISSION_DENIED)
and the victim finishes; a Release must name its request; heartbeats list exactly the
requests a stream carries."""
from __future__ import annotations

import pytest
import torch

from runtime.items import Alive, Cancel, Credit, NodeError, NodeOutput, OpenNode, Release
from runtime import item_proto as wire
from tests.fixtures.components import Echo, Flaky, inline_ref
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.config import TransportConfig

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def flaky():
    server = start_in_process(Flaky())
    yield server
    server.stop()


def _open(rid: str, **params) -> OpenNode:
    return OpenNode(request_id=rid, node="echo", inputs={"x": inline_ref(torch.arange(4.0))}, params=params)


def test_a_foreign_cancel_or_credit_is_refused_and_the_victim_lives_on(flaky):
    with RunStream(flaky.address) as owner, RunStream(flaky.address) as stranger:
        owner.send(_open("victim", hold=True))
        assert wait_until(lambda: "victim" in flaky.hosted.component.held)
        stranger.send(Cancel("victim", "not yours"), Credit("victim", "echo", "x", 5))
        refusals = stranger.events()
        assert [e.status for e in refusals] == ["PERMISSION_DENIED"] * 2
        assert all(isinstance(e, NodeError) and "not open on this stream" in e.message for e in refusals)
        assert "victim" in flaky.hosted.component.held and describe(flaky.address).num_open_requests == 1
        owner.send(Cancel("victim", "done"))
        assert wait_until(lambda: describe(flaky.address).num_open_requests == 0)


def test_heartbeats_list_the_requests_of_their_own_stream_only(flaky):
    with RunStream(flaky.address) as a, RunStream(flaky.address) as b:
        a.send(_open("hb-a", hold=True))
        b.send(_open("hb-b", hold=True))

        def beats(stream) -> set[str]:
            msg = stream.recv(heartbeats=True)
            return {rid for ev in wire.events_from_proto(msg) if isinstance(ev, Alive) for rid in ev.request_ids}

        assert wait_until(lambda: beats(a) == {"hb-a"}, 30)
        assert wait_until(lambda: beats(b) == {"hb-b"}, 30)
        a.send(Cancel("hb-a"))
        b.send(Cancel("hb-b"))
        assert wait_until(lambda: describe(flaky.address).num_open_requests == 0)


@pytest.fixture
def shm_echo():
    server = start_in_process(Echo(), transport_config=TransportConfig(host_id="test-host", inline_threshold=0))
    yield server
    server.stop()


def test_a_release_needs_the_owning_request(shm_echo):
    leases = lambda: shm_echo.hosted.transport.stats()["num_leases"]  # noqa: E731
    with RunStream(shm_echo.address) as owner, RunStream(shm_echo.address) as stranger:
        owner.send(_open("held-lease"))
        out = next(e for e in owner.events() if isinstance(e, NodeOutput))
        lease = out.tensors["x"].lease_id
        stranger.send(Release("", (lease,)))  # no request named: it frees nothing
        [refused] = stranger.events()
        assert refused.status == "INVALID_ARGUMENT" and "release.request_id" in refused.message
        stranger.send(Release("held-lease", (lease,)))  # another stream's request
        [refused] = stranger.events()
        assert refused.status == "PERMISSION_DENIED"
        assert leases() == 1
        owner.send(Release("held-lease", (lease,)))
        assert wait_until(lambda: leases() == 0)
        owner.send(Cancel("held-lease"))
