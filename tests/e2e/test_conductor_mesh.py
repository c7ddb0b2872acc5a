"""The conductor in front of three real toy services: the mesh equals the in-process
run, concurrent requests each get their solo result, cancellation cleans up every
service, a failing node fails only its request."""
import asyncio
import time

import grpc
import pytest
import torch

from conductor.model import ServedModel
from conductor.placement import Placement
from conductor.executor_setup import inprocess_executor
from conductor.service import ConductorService
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from bench import toys
from tests.fixtures import registry
from tests.fixtures.services import describe, start_side_by_side, wait_until
from transport.codec import inline_ref, view
from transport.ref_proto import ref_to_proto

pytestmark = pytest.mark.timeout(120)
FACTORIES = {"svc_embed": "make_failing_embed", "svc_lm": "make_slow_lm", "svc_codec": "make_codec"}


@pytest.fixture(scope="module")
def mesh():
    procs = {name: ServiceProcess(f"bench.toys:{factory}", name=name) for name, factory in FACTORIES.items()}
    start_side_by_side(list(procs.values()))
    for proc in procs.values():
        registry.register(proc.address, describe(proc.address).arena)
    placement = Placement.from_dict({
        "services": {name: {"replicas": [p.address]} for name, p in procs.items()},
        "placement": {"embed": "svc_embed", "lm": "svc_lm", "codec": "svc_codec"},
    })
    model = ServedModel("toy", toys.toy_pipeline(), placement, {"gen"})
    server = BackgroundServer(ConductorService([model]))
    server.start()
    yield server, procs
    server.stop()
    for proc in procs.values():
        registry.unregister(proc.address)
        proc.stop()


def request(x: float, rid: str) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model="toy", request_id=rid)
    nt = req.inputs.add(name="x")
    ref_to_proto(inline_ref(torch.tensor([x])), nt.tensor)
    return req


def collect(events) -> dict:
    out = {}
    for ev in events:
        if ev.WhichOneof("kind") == "tensor":
            t = ev.tensor.tensor
            out.setdefault(ev.tensor.name, []).append(view(t.inline_bytes, "float32", tuple(t.shape)).tolist())
    return out


def inprocess(x: float) -> dict:
    async def main():
        async with inprocess_executor(toys.toy_pipeline(), [toys.make_embed(), toys.make_lm(), toys.make_codec()],
                                      {"gen"}) as ex:
            out = {}
            async for name, value in ex.generate("r", {"x": (torch.tensor([x]),)}):
                out.setdefault(name, []).append(value.tolist())
            return out

    return asyncio.run(main())


def test_mesh_equals_inprocess_and_concurrent_requests_get_their_solo_result(mesh):
    server, _ = mesh
    xs = [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0]

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(i, x):
                return collect([ev async for ev in stub.Generate(request(x, f"c{i}"))])

            return await asyncio.gather(*(one(i, x) for i, x in enumerate(xs)))

    results = asyncio.run(main())
    for x, got in zip(xs, results):
        expected = inprocess(x)
        assert got == expected, x
        frames = [f[0] for f in expected["frame"]]
        assert [a for chunk in expected["audio"] for a in chunk] == [10 * f for f in frames]  # each frame once


def test_generate_batches_carries_generates_events_in_batches(mesh):
    server, _ = mesh
    with grpc.insecure_channel(server.address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        batches = list(stub.GenerateBatches(request(3.0, "batched")))
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.GenerateBatches(pb.GenerateRequest(model="nope")))
    events = [ev for batch in batches for ev in batch.events]
    assert all(batch.events for batch in batches) and len(batches) <= len(events)
    assert collect(events) == inprocess(3.0)
    assert events[-1].WhichOneof("kind") == "usage" and sum(ev.WhichOneof("kind") == "usage" for ev in events) == 1
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # Generate's statuses


def test_cancel_mid_stream_frees_state_everywhere(mesh):
    server, procs = mesh
    with grpc.insecure_channel(server.address) as channel:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(request(1.0, "cancel-me"))
        next(call)  # the first frame arrived: the loop is running on svc_lm
        assert describe(procs["svc_lm"].address).num_open_requests == 1
        call.cancel()
    executor = server.hosted.executors["toy"]
    assert wait_until(lambda: not executor.requests, 5.0)  # conductor-side state and buffers gone
    for proc in procs.values():
        assert wait_until(lambda: describe(proc.address).num_open_requests == 0, 5.0), proc.name


def test_deadline_cancels_everywhere(mesh):
    server, procs = mesh
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            list(conductor_pb2_grpc.ConductorStub(channel).Generate(request(1.0, "late"), timeout=0.2))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert wait_until(lambda: not server.hosted.executors["toy"].requests, 5.0)
    for proc in procs.values():
        assert wait_until(lambda: describe(proc.address).num_open_requests == 0, 5.0), proc.name


def test_a_failing_node_fails_only_its_request(mesh):
    server, _ = mesh

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(rid):
                try:
                    return collect([ev async for ev in stub.Generate(request(2.0, rid))])
                except grpc.aio.AioRpcError as e:
                    return e

            return await asyncio.gather(one("doomed"), one("fine"))

    doomed, fine = asyncio.run(main())
    assert isinstance(doomed, grpc.aio.AioRpcError) and doomed.code() == grpc.StatusCode.INTERNAL
    assert "on purpose" in doomed.details()
    assert fine == inprocess(2.0)


def test_list_models_and_unknown_model(mesh):
    server, _ = mesh
    with grpc.insecure_channel(server.address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        models = stub.ListModels(pb.ListModelsRequest()).models
        assert [(m.name, list(m.walks)) for m in models] == [("toy", ["speak"])]
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Generate(pb.GenerateRequest(model="nope")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "nope" in err.value.details()


def test_overload_past_the_limits_is_refused_quickly_and_the_admitted_finish(mesh):
    """4x the limits at once: the excess is RESOURCE_EXHAUSTED with a retry hint before
    any of them ran, every admitted request finishes, and the conductor never held more
    than its limits."""
    from conductor.admission import Admission, AdmissionConfig

    _, procs = mesh
    limits = AdmissionConfig(max_in_flight=2, max_waiting=2)
    placement = Placement.from_dict({
        "services": {name: {"replicas": [p.address]} for name, p in procs.items()},
        "placement": {"embed": "svc_embed", "lm": "svc_lm", "codec": "svc_codec"},
    })
    admission = Admission({"toy": limits})
    conductor = BackgroundServer(ConductorService([ServedModel("toy", toys.toy_pipeline(), placement, {"gen"})],
                                                  admission=admission))
    conductor.start()
    num = 4 * (limits.max_in_flight + limits.max_waiting)
    peak = {"held": 0}

    async def main():
        async with grpc.aio.insecure_channel(conductor.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(i):
                try:
                    return collect([ev async for ev in stub.Generate(request(3.0, f"over-{i}"))])
                except grpc.aio.AioRpcError as e:
                    return e
                finally:
                    stats = admission.stats("toy")
                    peak["held"] = max(peak["held"], stats["in_flight"] + stats["waiting"])

            return await asyncio.gather(*(one(i) for i in range(num)))

    try:
        results = asyncio.run(main())
    finally:
        conductor.stop()
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    admitted = [r for r in results if not isinstance(r, grpc.aio.AioRpcError)]
    assert all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in refused), [r.details() for r in refused]
    assert all(int(dict(r.trailing_metadata())["retry-after-ms"]) > 0 for r in refused)
    assert len(admitted) >= limits.max_in_flight + limits.max_waiting and len(refused) >= num // 2
    expected = inprocess(3.0)
    assert all(got == expected for got in admitted)
    assert peak["held"] <= limits.max_in_flight + limits.max_waiting
    admission.check_integrity()
    for proc in procs.values():
        assert wait_until(lambda: describe(proc.address).num_open_requests == 0, 10.0), proc.name


def test_an_over_limit_request_is_refused_alone_while_eight_others_finish(mesh):
    """Blast radius of one: a request past the front door's limits fails by itself with
    INVALID_ARGUMENT naming the input and the limit; the requests sent with it, on the
    same services, all finish with their solo result."""
    from conductor.input_limits import InputLimits

    _, procs = mesh
    placement = Placement.from_dict({
        "services": {name: {"replicas": [p.address]} for name, p in procs.items()},
        "placement": {"embed": "svc_embed", "lm": "svc_lm", "codec": "svc_codec"},
    })
    limits = InputLimits(max_input_bytes=64 << 10, max_request_bytes=128 << 10)
    conductor = BackgroundServer(ConductorService([ServedModel("toy", toys.toy_pipeline(), placement, {"gen"})],
                                                  limits=limits))
    conductor.start()
    huge = pb.GenerateRequest(model="toy", request_id="huge")
    ref_to_proto(inline_ref(torch.zeros(1 << 18)), huge.inputs.add(name="x").tensor)  # 1 MiB of float32

    async def main():
        async with grpc.aio.insecure_channel(conductor.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)

            async def one(req):
                try:
                    return collect([ev async for ev in stub.Generate(req)])
                except grpc.aio.AioRpcError as e:
                    return e

            normal = [request(float(i), f"ok-{i}") for i in range(8)]
            return await asyncio.gather(*(one(r) for r in [*normal[:4], huge, *normal[4:]]))

    try:
        results = asyncio.run(main())
    finally:
        conductor.stop()
    refused = results.pop(4)
    assert isinstance(refused, grpc.aio.AioRpcError) and refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inputs[x]" in refused.details() and "max_input_bytes" in refused.details()
    assert results == [inprocess(float(i)) for i in range(8)]
