"""The conductor as a gRPC service: `Conductor.Generate` and `ListModels` (the front door).

Thin servicer: checks and converts a GenerateRequest to walk inputs
(conductor.generate_request, within the InputLimits), runs the executor, converts
each walk output to a GenerateEvent. Client cancellation or deadline closes the
generator, which cancels the request on every service it reached.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc

from conductor.client_outputs import ClientOutputs
from conductor.executor import Executor
from conductor.metrics import ConductorMetrics, RequestMeter
from conductor.model import ServedModel
from conductor.executor_setup import remote_executor
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from conductor.generate_request import parse_generate_request, served_model
from conductor.input_limits import InputLimits
from runtime.grpc_status import map_errors
from core.errors import Unavailable

log = logging.getLogger(__name__)
CONDUCTOR_SERVICE = pb.DESCRIPTOR.services_by_name["Conductor"].full_name


class ConductorServicer(conductor_pb2_grpc.ConductorServicer):
    def __init__(self, service: "ConductorService") -> None:
        self.service = service

    @map_errors
    async def Generate(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext):
        model = served_model(self.service.served, request.model)
        executor = self.service.executors.get(model.name)
        if executor is None:
            raise Unavailable(f"model {model.name!r} is still starting")
        request_id = request.request_id
        num_outputs = 0
        meter = RequestMeter(self.service.metrics, model, time.perf_counter())
        outcome = "failed"
        try:
            parsed = parse_generate_request(request, model, self.service.limits)  # before any work
            request_id = parsed.request_id
            async for name, value in executor.generate(request_id, parsed.inputs, parsed.params):
                num_outputs += 1
                meter.output(name, value, time.perf_counter())
                yield self.service.outputs.event(request_id, name, value)
            outcome = "ok"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            meter.end(outcome, time.perf_counter())
        usage = pb.Usage()
        usage.metrics.update({"num_outputs": num_outputs})
        yield pb.GenerateEvent(request_id=request_id, usage=usage)

    @map_errors
    async def ListModels(self, request, context):
        models = [pb.ModelInfo(name=m.name, walks=[w.name for w in m.graph.walks]) for m in self.service.models]
        return pb.ListModelsResponse(models=models)


class ConductorService:
    """runtime.server.HostedService for the conductor: one executor per model,
    each holding one Run stream per replica, opened when the server starts."""

    service_names = (CONDUCTOR_SERVICE,)

    def __init__(self, models: list[ServedModel], telemetry=None, metrics: ConductorMetrics | None = None,
                 limits: InputLimits | None = None) -> None:
        self.models = models
        self.served = {m.name: m for m in models}
        self.limits = limits or InputLimits()
        self.telemetry = telemetry
        self.metrics = metrics
        self.executors: dict[str, Executor] = {}
        self.outputs = ClientOutputs()
        self._stack = contextlib.AsyncExitStack()
        self._task = None

    def register(self, server: grpc.aio.Server) -> None:
        conductor_pb2_grpc.add_ConductorServicer_to_server(ConductorServicer(self), server)

    def start(self) -> None:
        import asyncio

        self._task = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        for model in self.models:
            tracer = self.telemetry.tracer if self.telemetry else None
            interceptors = self.telemetry.client_interceptors() if self.telemetry else None
            on_edge = self.metrics.edge_observer(model.name) if self.metrics is not None else None
            executor = await self._stack.enter_async_context(
                remote_executor(model.graph, model.placement, model.inner_loops, tracer, interceptors,
                                lockstep_nodes=model.lockstep_nodes, on_edge=on_edge,
                                direct_edges=model.direct_edges))
            self.executors[model.name] = executor

    def ready(self) -> bool:
        return len(self.executors) == len(self.models)

    async def drain(self, timeout_s: float) -> None:
        import asyncio

        deadline = asyncio.get_running_loop().time() + timeout_s
        while any(ex.requests for ex in self.executors.values()):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        await self._stack.aclose()

    def close(self) -> None:
        self.outputs.close()
