"""Tensors through real service processes: every dtype/shape class through each
transport (inline, shm, Mooncake TCP), 64 MiB and 300 MiB tensors, broken streams
and kill -9 of a producer."""
import itertools
import os
import time

import pytest
import torch

from runtime.items import NodeError, OpenNode
from runtime.process import ServiceProcess
from tests.e2e.mesh import ECHO, HOST_A, HOST_B, Mesh
from tests.fixtures.components import inline_ref
from tests.fixtures.services import RunStream, describe, wait_until
from tests.transport.test_codec import SHAPES, _as
from transport.config import TransportConfig
from transport.dtypes import ELEMENT_SIZES
from transport.transport import Transport

pytestmark = pytest.mark.timeout(300)
ROUTES = {  # transport -> (producer, consumer)
    "inline": ("Q", "R"),
    "shm": ("P", "Q"),
    "mooncake": ("P", "R"),
}
_ids = itertools.count()


@pytest.fixture(scope="module")
def mesh():
    m = Mesh()
    yield m
    m.close()


@pytest.fixture(scope="module")
def client():
    t = Transport(TransportConfig(host_id=HOST_A, enable_mooncake=True))
    yield t
    t.close()


def route(mesh, client, x, transport):
    """client -> producer -> (transport) -> consumer -> client; returns the tensor back."""
    rid = f"req-{next(_ids)}"
    producer, consumer = (mesh.nodes[n] for n in ROUTES[transport])
    ref = client.export(x, request_id=rid, carrier="test", consumer_host_ids=(producer.host_id,))
    mid, consumed = producer.run(rid, ref, consumer.host_id)
    assert not isinstance(mid, NodeError), mid
    assert mid.kind == transport or (transport != "inline" and x.numel() == 0)
    mesh.acknowledge(rid, consumed, client)
    out, consumed = consumer.run(rid, mid, HOST_A)
    assert not isinstance(out, NodeError), out
    mesh.acknowledge(rid, consumed, client)
    back = client.resolve(out, request_id=rid)
    tensor = back.tensor.clone()
    back.close()
    if out.lease_id is not None:
        mesh.acknowledge(rid, [back.consumed], client)
    mesh.finish(rid)
    return tensor, out.kind


@pytest.mark.parametrize("transport", sorted(ROUTES))
def test_every_dtype_and_shape_between_two_services(mesh, client, transport):
    for dtype, shape in itertools.product(sorted(ELEMENT_SIZES), sorted(SHAPES)):
        x = _as(dtype, SHAPES[shape]())
        back, _ = route(mesh, client, x, transport)
        assert back.dtype == x.dtype and back.shape == x.shape, (dtype, shape)
        assert torch.equal(back, x), (dtype, shape)


@pytest.mark.parametrize("transport", ["shm", "mooncake"])
@pytest.mark.parametrize("mib", [64, 300])
def test_large_tensors(mesh, client, transport, mib):
    x = torch.randn(mib << 18, generator=torch.Generator().manual_seed(mib))  # float32: mib MiB
    back, kind = route(mesh, client, x, transport)
    assert kind == ("shm" if transport == "shm" else "mooncake")  # the way back to host A
    assert torch.equal(back, x)


def test_broken_stream_frees_every_lease_it_carried(mesh, client):
    producer = mesh.nodes["P"]
    stream = RunStream(producer.process.address)
    for i in range(3):
        stream.send(OpenNode(f"broken-{i}", "echo", inputs={"x": inline_ref(torch.ones(1000))},
                             consumer_host_ids=(HOST_A,)))
    got = []
    while len(got) < 6:  # output + done per request
        got += stream.events()
    assert describe(producer.process.address).transport.num_leases == 3  # nobody acknowledged
    stream.cancel()
    assert wait_until(lambda: describe(producer.process.address).transport.num_leases == 0, 5.0)
    stream.close()


@pytest.mark.parametrize("transport", ["shm", "mooncake"])
def test_kill_9_of_a_producer(mesh, client, transport):
    consumer = mesh.nodes[ROUTES[transport][1]]
    doomed = ServiceProcess(ECHO, ["--host-id", HOST_A, "--inline-threshold", "0", "--mooncake"]).start()
    arena = describe(doomed.address).arena
    with RunStream(doomed.address) as stream:
        stream.send(OpenNode("doomed", "echo", inputs={"x": inline_ref(torch.arange(5000))},
                             consumer_host_ids=(consumer.host_id,)))
        ref = stream.events()[0].tensors["x"]
        doomed.kill()
    t0 = time.monotonic()
    err, _ = consumer.run("in-flight", ref, HOST_A)
    assert isinstance(err, NodeError) and err.status == "UNAVAILABLE", err
    assert time.monotonic() - t0 < 2.0
    back, _ = route(mesh, client, torch.arange(10), "inline")  # the consumer is still healthy
    assert torch.equal(back, torch.arange(10))
    mesh.finish("in-flight")
    assert os.path.exists(f"/dev/shm/{arena}")
    ServiceProcess(ECHO, ["--host-id", HOST_A]).start().stop()  # the next start sweeps it
    assert not os.path.exists(f"/dev/shm/{arena}")
