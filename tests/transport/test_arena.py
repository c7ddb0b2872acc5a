"""Leases, pins, headers and the bounded wait, in one process."""
import gc
import threading

import pytest
import torch

import transport.arena as arena_module
from transport.config import TransportConfig
from core.errors import ArenaFull, BadTensorRef, UnknownLease
from transport.refs import ShmLocation, TensorRef
from transport.transport import Transport


@pytest.fixture
def transport():
    t = Transport(TransportConfig(inline_threshold=0, arena_bytes=4 << 20, full_wait_s=0.3, host_id="h"))
    yield t
    t.close()


def _export(t, n=1000, request_id="r", carrier="c"):
    return t.export(torch.arange(n, dtype=torch.float32), request_id=request_id, carrier=carrier)


def test_lease_not_reused_while_view_alive(transport):
    ref = _export(transport)
    res = transport.resolve(ref)
    view = res.tensor[10:20]  # a derived view keeps the lease pinned too
    res.close()
    transport.release([ref.lease_id])
    gc.collect()
    assert transport.arena.num_leases == 1  # acknowledged, but a view is alive
    other = _export(transport)
    assert other.location.offset != ref.location.offset
    assert torch.equal(view, torch.arange(10, 20, dtype=torch.float32))
    del view
    gc.collect()
    assert transport.arena.num_leases == 1
    transport.release([other.lease_id])
    assert transport.arena.num_leases == 0
    transport.arena.check_integrity()


def test_acknowledge_frees_and_space_is_reused(transport):
    ref = _export(transport)
    transport.release([ref.lease_id])
    assert transport.arena.num_leases == 0
    again = _export(transport)
    assert again.location.offset == ref.location.offset
    with pytest.raises(UnknownLease, match="not live"):
        transport.resolve(ref)  # header now carries the new lease id
    transport.release([again.lease_id])


def test_fan_out_needs_every_ack(transport):
    x = torch.ones(100)
    ref = transport.export(x, request_id="r", carrier="c", consumer_host_ids=["h", "h"])
    transport.release([ref.lease_id])
    assert transport.arena.num_leases == 1
    transport.release([ref.lease_id])
    assert transport.arena.num_leases == 0


def test_release_by_request_and_by_carrier(transport):
    refs = [_export(transport, request_id=f"r{i % 2}", carrier=f"s{i % 3}") for i in range(6)]
    assert transport.release_request("r0") == 3
    assert transport.arena.num_leases == 3
    transport.release_carrier("s1")
    transport.release_carrier("s2")
    remaining = {r.lease_id for r in refs if r.location.lease_id in transport.arena._leases}
    assert all(transport.arena.get(i).carrier == "s0" for i in remaining)
    transport.release_carrier("s0")
    assert transport.arena.num_leases == 0


class _FakeClock:
    """The arena's clock, moved only by its condition's waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class _ClockedCondition(threading.Condition):
    """An arena condition whose waits pass on the fake clock (and return at once)."""

    def __init__(self, clock: _FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout=None):
        self.clock.now += timeout
        return False


class _NotingCondition(threading.Condition):
    """An arena condition that says when a lease first waits in it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


def test_full_arena_waits_then_raises(transport, monkeypatch):
    big = _export(transport, n=(3 << 20) // 4)
    # Timed on a clock that only the lease's own waits move: what it waited is what it
    # asked to wait, however busy the machine is.
    clock = _FakeClock()
    monkeypatch.setattr(arena_module, "time", clock)
    monkeypatch.setattr(transport.arena, "_cond", _ClockedCondition(clock))
    with pytest.raises(ArenaFull, match="no room"):
        _export(transport, n=(2 << 20) // 4)
    assert 0.25 < clock.now < 2.0  # the full_wait_s of 0.3, then ArenaFull
    with pytest.raises(ArenaFull, match="exceeds arena"):
        _export(transport, n=(8 << 20) // 4)
    transport.release([big.lease_id])


def test_full_arena_proceeds_when_space_frees(transport, monkeypatch):
    big = _export(transport, n=(3 << 20) // 4)
    # The space frees once the lease waits for it; a wait bound that only a hung test
    # reaches keeps a slow release thread from turning into ArenaFull.
    monkeypatch.setattr(transport.arena, "full_wait_s", 60.0)
    cond = _NotingCondition()
    monkeypatch.setattr(transport.arena, "_cond", cond)

    def release_once_waiting():
        if cond.waiting.wait(60):
            transport.release([big.lease_id])

    releaser = threading.Thread(target=release_once_waiting)
    releaser.start()
    ref = _export(transport, n=(2 << 20) // 4)
    releaser.join(10)
    assert cond.waiting.is_set()  # it did wait for the space
    transport.release([ref.lease_id])


@pytest.mark.parametrize(
    "mutate, error",
    [
        (dict(offset=1 << 40), BadTensorRef),
        (dict(lease_id=999), UnknownLease),
        (dict(arena="starmesh-doesnotexist"), UnknownLease),
        (dict(arena="../etc/passwd"), UnknownLease),
        (dict(host_id="elsewhere"), BadTensorRef),  # never resolvable here: the sender's mistake
    ],
)
def test_bad_references_raise_clear_errors(transport, mutate, error):
    ref = _export(transport)
    loc = ref.location
    fields = dict(arena=loc.arena, offset=loc.offset, nbytes=loc.nbytes, lease_id=loc.lease_id, host_id=loc.host_id)
    fields.update(mutate)
    bad = TensorRef(ref.dtype, ref.shape, ShmLocation(**fields))
    with pytest.raises(error):
        transport.resolve(bad)
    transport.release([ref.lease_id])


def test_shape_and_nbytes_mismatch_rejected_at_construction():
    loc = ShmLocation("starmesh-x", 64, 12, 1, "h")
    with pytest.raises(BadTensorRef, match="need 16"):
        TensorRef("float32", (4,), loc)
    with pytest.raises(BadTensorRef, match="not supported"):
        TensorRef("complex64", (3,), loc)
    with pytest.raises(BadTensorRef, match="negative"):
        TensorRef("float32", (-3,), loc)
