"""Owner liveness by flock: zero-copy reads, kill -9, and the startup sweep."""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from transport.config import TransportConfig
from core.errors import PeerUnavailable
from transport.refs import MooncakeLocation, ShmLocation, TensorRef
from transport.segment import PeerSegment, sweep_stale_segments
from transport.transport import Transport


class Producer:
    def __init__(self, host_id="h", mooncake=False):
        args = [sys.executable, "-m", "tests.fixtures.producer_proc", host_id] + (["mooncake"] if mooncake else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.arena = json.loads(self.proc.stdout.readline())["arena"]

    def export(self, kind="shm", numel=1000, dtype="float32") -> TensorRef:
        self.proc.stdin.write(f"{kind} {numel} {dtype}\n")
        self.proc.stdin.flush()
        msg = json.loads(self.proc.stdout.readline())
        loc_type = ShmLocation if msg["kind"] == "shm" else MooncakeLocation
        return TensorRef(msg["dtype"], tuple(msg["shape"]), loc_type(**msg["loc"]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


@pytest.fixture
def consumer():
    t = Transport(TransportConfig(host_id="h", inline_threshold=0))
    yield t
    t.close()


def test_zero_copy_read_of_a_live_producer(consumer):
    producer = Producer()
    try:
        ref = producer.export(numel=4096)
        res = consumer.resolve(ref)
        assert torch.equal(res.tensor, torch.arange(4096, dtype=torch.float32))
        mm = consumer.peers._segments[producer.arena].mm
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        ptr = res.tensor.data_ptr()
        assert base <= ptr and ptr + res.tensor.nbytes <= base + len(mm)  # inside the mapping: no copy
        assert sweep_stale_segments() == []  # the owner is alive: never swept
        assert os.path.exists(f"/dev/shm/{producer.arena}")
        res.close()
    finally:
        producer.stop()
    assert not os.path.exists(f"/dev/shm/{producer.arena}")  # normal exit unlinks


def test_kill_9_fails_fast_and_next_start_sweeps(consumer, monkeypatch):
    producer = Producer()
    ref = producer.export()
    view = consumer.resolve(ref).tensor  # a view taken before the crash stays readable
    os.kill(producer.proc.pid, signal.SIGKILL)
    producer.proc.wait(10)
    probes = []
    is_owner_alive = PeerSegment.is_owner_alive

    def noted_probe(segment):
        probes.append(is_owner_alive(segment))
        return probes[-1]

    monkeypatch.setattr(PeerSegment, "is_owner_alive", noted_probe)
    with pytest.raises(PeerUnavailable, match="gone"):
        consumer.resolve(ref)
    # Fast: one non-blocking probe of the owner's lock decided it, with no wait or retry
    assert probes == [False]
    assert float(view.sum()) == sum(range(1000))  # no segfault on the dead owner's pages
    assert os.path.exists(f"/dev/shm/{producer.arena}")
    fresh = Transport(TransportConfig(host_id="h"))  # a new start sweeps the dead segment
    fresh.close()
    assert not os.path.exists(f"/dev/shm/{producer.arena}")


def test_mooncake_read_from_another_host_and_kill_9(monkeypatch):
    # Mooncake gives up on a read nobody answers after its transfer timeout, 30 s unless
    # MC_TRANSFER_TIMEOUT (read as the consumer's engine starts) says otherwise.
    monkeypatch.delenv("MC_TRANSFER_TIMEOUT", raising=False)
    consumer = Transport(TransportConfig(host_id="other", inline_threshold=0, enable_mooncake=True))
    producer = Producer(host_id="h", mooncake=True)
    try:
        ref = producer.export(kind="mooncake", numel=50_000, dtype="int64")
        assert ref.kind == "mooncake"
        res = consumer.resolve(ref, request_id="r")
        assert torch.equal(res.tensor, torch.arange(50_000))
        local = consumer.arena
        ptr = res.tensor.data_ptr()
        assert local.base_address <= ptr < local.base_address + local.allocator.total  # landed in our arena
        res.close()
        os.kill(producer.proc.pid, signal.SIGKILL)
        producer.proc.wait(10)
        t0 = time.monotonic()
        with pytest.raises(PeerUnavailable):
            consumer.resolve(ref, request_id="r")
        # Failing fast happens inside Mooncake's engine, where no state shows it: elapsed time
        # is the only witness. The bound is a third of that timeout, not a quiet machine's
        # pace: a refused read fails in milliseconds, only one that waited out the timeout fails this.
        assert time.monotonic() - t0 < 10.0
    finally:
        producer.stop()
        consumer.close()
        sweep_stale_segments()
