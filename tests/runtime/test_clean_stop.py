"""A stop that ends normally logs no ERROR and no traceback; a real failure still does.

- closing a Run stream the service already ended is not an error (runtime.run_client);
- a service stopped by SIGTERM while a peer holds a Run stream and a health watch open
  (the conductor, a producer's peer link) ends those calls without grpc's "Exception not
  handled" ERROR and its tracebacks (runtime.settle_calls);
- `starmesh up` stopped by SIGTERM, after serving a request, prints neither in any process;
- a drain that fails is still logged with its cause.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runtime.process import ServiceProcess
from runtime.run_client import ComponentClient
from tests.e2e.default_up import Output, run_env, trouble

pytestmark = pytest.mark.timeout(300)


class _EndedCall:
    """A Run call whose end grpc has not processed yet: done_writing fails as grpc's does."""

    def __init__(self) -> None:
        self.cancelled = False

    async def done_writing(self) -> None:
        from grpc._cython import cygrpc

        raise cygrpc.ExecuteBatchError("Failed grpc_call_start_batch: 8")  # what a closed call gives

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_closing_a_stream_the_service_already_ended_is_not_an_error(caplog):
    async def close() -> _EndedCall:
        client = ComponentClient("127.0.0.1:9")  # never connected: the channel only has to close
        client.call = call = _EndedCall()
        await client.close()
        return call

    with caplog.at_level(logging.DEBUG, logger="runtime.run_client"):
        call = asyncio.run(close())
    assert call.cancelled
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_read_cut_by_the_servers_stop_ends_the_stream_without_a_traceback(caplog):
    """A stop while a peer's Run stream is mid-read: grpc raises its server-stopped error
    from the request iterator; the stream ends, and the log carries no traceback (the
    stop of `starmesh up` is checked for tracebacks in every process)."""
    from grpc._cython import cygrpc

    from runtime.servicer import _END, ComponentServicer

    async def stopped_server():
        raise cygrpc._ServerStoppedError("Server already stopped.")
        yield  # an async iterator of RunRequests, as grpc hands the servicer

    async def read():
        outbox: asyncio.Queue = asyncio.Queue()
        await ComponentServicer(None, None, None, "test")._read(stopped_server(), "s", outbox)
        return outbox.get_nowait()

    with caplog.at_level(logging.DEBUG, logger="runtime.servicer"):
        assert asyncio.run(read()) is _END
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def _hold_then_stop(svc: ServiceProcess) -> None:
    """A Run stream and a health watch open on `svc`, then its SIGTERM; both end."""
    run = ComponentClient(svc.address)
    await run.__aenter__()
    await run.call.wait_for_connection()
    channel = grpc.aio.insecure_channel(svc.address)
    watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
    await watch.read()
    svc.terminate()
    for call in (run.call, watch):
        while await call.read() is not grpc.aio.EOF:
            pass  # the health watch says NOT_SERVING first
    await run.close()
    await channel.close()


def test_sigterm_with_streams_held_open_ends_them_without_an_error():
    lines: list[str] = []
    svc = ServiceProcess("tests.fixtures.components:make_flaky", name="flaky", log=lines.append).start()
    try:
        with pytest.raises(grpc.aio.AioRpcError):  # the stop cancels them: UNAVAILABLE, as before
            asyncio.run(_hold_then_stop(svc))
        assert svc.proc.wait(60) == 0
    finally:
        svc.stop()
    svc._reader.join(10)
    text = "\n".join(lines)
    assert "stopped" in text and not trouble(text), text


def test_up_stopped_by_sigterm_prints_no_error_in_any_process(tmp_path):
    """The toy model's deployment (one service: a cheap `up`), one request, SIGTERM."""
    from client.generate_call import GenerateCall
    from client.session import ConductorSession
    from cluster.deployment_dir import SHIPPED_DIR
    from cluster.shipped_deployments import with_free_ports, write_deployment
    from conductor.deployment_file import load_yaml

    path = write_deployment(with_free_ports(load_yaml(SHIPPED_DIR / "toy-tagger.yaml")), str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "cli", "up", "--deployment", str(path)], env=run_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = Output(proc)
    try:
        lines = output.wait_for("Ctrl-C stops everything", 240)
        conductor = next(ln.split()[1] for ln in lines if ln.startswith("  conductor"))

        async def tag() -> list:
            async with ConductorSession(conductor) as session:
                return [e async for e in session.generate(GenerateCall("toy-tagger", text="stop me"))]

        assert asyncio.run(tag())
    finally:
        text = output.stop(signal.SIGTERM)
    assert proc.returncode == 0, text[-3000:]
    assert not trouble(text), text[-4000:]


class _FailingDrain:
    service_names = ()

    def register(self, server) -> None:
        pass

    def start(self) -> None:
        pass

    def ready(self) -> bool:
        return True

    async def drain(self, timeout_s: float) -> None:
        raise RuntimeError("the engine thread would not stop")

    def close(self) -> None:
        pass


def test_a_drain_that_fails_is_still_logged_with_its_cause(caplog):
    from runtime.server import GrpcServer, ServerConfig

    async def run() -> None:
        server = GrpcServer(_FailingDrain(), ServerConfig(grace_s=0.1))
        await server.start()
        await server.wait_serving(10)
        await server.stop()

    with caplog.at_level(logging.INFO, logger="runtime.server"):
        asyncio.run(run())
    # the server's own records: grpc's process-wide poller may log about an earlier test's
    # closed loop meanwhile (in-process only: each service process has one loop)
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "runtime.server"]
    assert [r.getMessage() for r in failed] == ["draining failed"]
    assert "the engine thread would not stop" in str(failed[0].exc_info[1])
