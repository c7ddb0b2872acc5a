"""What `auto` picks for a tensor, by its size and its consumers' hosts."""
import pytest
import torch

from transport.config import CLIENT_HOST, TransportConfig
from transport.transport import Transport

BIG = 64 * 1024  # the default inline threshold, in bytes


@pytest.fixture
def transport():
    t = Transport(TransportConfig(host_id="h", arena_bytes=4 << 20))
    yield t
    t.close()


def test_small_values_and_the_client_go_inline_the_rest_by_host(transport):
    assert transport.select(BIG - 1, ("h",)) == "inline"
    assert transport.select(BIG, ("h",)) == "shm"
    assert transport.select(BIG, ()) == "shm"  # read by no service: kept here until its request ends
    assert transport.select(BIG, ("h", CLIENT_HOST)) == "inline"  # the client maps no arena


def test_another_host_without_mooncake_gets_the_bytes_in_the_message(transport):
    """No transfer engine in this process: a consumer on another host is sent the
    value itself (as a client is), never a reference it could not read."""
    assert transport.select(BIG, ("h", "other")) == "inline"
    ref = transport.export(torch.arange(BIG // 4, dtype=torch.float32), request_id="r", carrier="c",
                           consumer_host_ids=("other",))
    assert ref.kind == "inline" and transport.arena.num_leases == 0
