"""A run's outputs pick their transport port by port: a client port (read by the
conductor or its client) travels inline, any other goes by reference to the hosts of
the services that read it, leased for one acknowledgement per host."""
from __future__ import annotations

import pytest
import torch

from runtime.items import NodeOutput, OpenNode, Release
from tests.fixtures.components import Echo, inline_ref, inline_tensor
from tests.fixtures.services import RunStream, start_in_process, wait_until
from transport.config import CLIENT_HOST, TransportConfig
from transport.transport import Transport

pytestmark = pytest.mark.timeout(60)

HOST = "test-host"
ROWS = torch.arange(3 * 1024.0).reshape(3, 1024)  # prompt rows [n, hidden]: 12 KiB
TOKEN = torch.tensor([7])


@pytest.fixture
def echo():
    """Every output of this service that may go by reference does (inline_threshold=0)."""
    server = start_in_process(Echo(), transport_config=TransportConfig(host_id=HOST, inline_threshold=0))
    yield server
    server.stop()


def _outputs(stream: RunStream, rid: str, **open_fields) -> dict:
    stream.send(OpenNode(rid, "echo", inputs={"hidden": inline_ref(ROWS), "token": inline_ref(TOKEN)},
                         **open_fields))
    out = next(ev for ev in stream.events() if isinstance(ev, NodeOutput))
    return out.tensors


def test_a_client_port_is_inline_while_the_others_go_by_reference(echo):
    consumer = Transport(TransportConfig(host_id=HOST))
    leases = echo.hosted.transport.stats
    try:
        with RunStream(echo.address) as stream:
            refs = _outputs(stream, "a", consumer_host_ids=(HOST,), client_ports=("token",))
            assert refs["token"].kind == "inline" and refs["hidden"].kind == "shm"
            assert torch.equal(inline_tensor(refs["token"]), TOKEN)
            resolved = consumer.resolve(refs["hidden"])
            assert torch.equal(resolved.tensor, ROWS)
            resolved.close()
            assert leases()["num_leases"] == 1
            # one consuming host, one ack: the client's inline copy owes none
            stream.send(Release("a", (refs["hidden"].lease_id,)))
            assert wait_until(lambda: leases()["num_leases"] == 0)

            both = _outputs(stream, "b", consumer_host_ids=(HOST,), client_ports=("hidden", "token"))
            assert both["hidden"].kind == both["token"].kind == "inline"  # a port read by both: inline
            assert torch.equal(inline_tensor(both["hidden"]), ROWS)

            services = _outputs(stream, "c", consumer_host_ids=(HOST,))
            assert services["hidden"].kind == services["token"].kind == "shm"
            # a conductor that marks the client among the hosts (before client_ports) still gets values
            marked = _outputs(stream, "d", consumer_host_ids=(HOST, CLIENT_HOST))
            assert marked["hidden"].kind == marked["token"].kind == "inline"
            # no service reads the run's outputs (a chat walk's prefill): its port nobody reads
            # goes inline as the client's does, not leased until the request ends
            alone = _outputs(stream, "e", client_ports=("token",))
            assert alone["hidden"].kind == alone["token"].kind == "inline"
    finally:
        consumer.close()
