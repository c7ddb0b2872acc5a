"""The conductor as a gRPC service: `Conductor.Generate` and `ListModels` (the front door).

Thin servicer: checks and converts a GenerateRequest to walk inputs
(conductor.generate_request, within the InputLimits, off the event loop:
conductor.request_intake), runs the executor, converts
each walk output to a GenerateEvent. Client cancellation or deadline closes the
generator, which cancels the request on every service it reached.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc

from conductor.admission import Admission
from conductor.auth import ApiKeyInterceptor
from conductor.client_events import GenerateEvents, RequestEvents, numel
from conductor.client_outputs import ClientOutputs
from conductor.executor import Executor, RequestFailed
from conductor.field_errors import client_failure
from conductor.metrics import ConductorMetrics, RequestMeter
from conductor.model import ServedModel
from conductor.model_info import model_info
from conductor.playback import Playback
from conductor.executor_setup import remote_executor
from conductor.membership import Membership
from conductor.replica_health import ReplicaHealth
from conductor.replica_targets import ReplicaTargets
from conductor.replicas import ReplicaSelector
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from conductor.generate_request import served_model
from conductor.input_limits import InputLimits
from conductor.request_intake import IntakeConfig, RequestIntake
from conductor.kept_contexts import KeptContexts
from conductor.session_limits import SessionLimits
from conductor.session_servicer import SESSIONS_SERVICE, SessionsServicer, add_sessions
from conductor.text_hold import TextHold
from conductor.tokenizer import load_tokenizer
from runtime.grpc_status import map_errors
from runtime.received_rows import RowsView
from core.errors import Unavailable

log = logging.getLogger(__name__)
CONDUCTOR_SERVICE = pb.DESCRIPTOR.services_by_name["Conductor"].full_name


class ConductorServicer(conductor_pb2_grpc.ConductorServicer):
    def __init__(self, service: "ConductorService") -> None:
        self.service = service

    @map_errors
    async def Generate(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext):
        async with contextlib.aclosing(self._batches(request, context, hold_text=False)) as batches:
            async for batch in batches:  # a message per event: holding text would save nothing
                for event in batch:
                    yield event

    @map_errors
    async def GenerateBatches(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext):
        async with contextlib.aclosing(self._batches(request, context)) as batches:
            async for batch in batches:
                yield pb.GenerateEventBatch(events=batch)

    async def _batches(self, request: pb.GenerateRequest, context, hold_text: bool = True,
                       report: dict | None = None, form=GenerateEvents):
        """The request's GenerateEvents, as lists of those made from outputs that arrived
        together (never empty); Usage last. hold_text: a request that gets audio sends its
        text deltas with its next batch (conductor.text_hold; the model's max_held_text);
        report: filled with what its nodes said of kept contexts, and `keeping`, the id its
        result is kept under (a caller that cancels it may release that id); form: what
        makes the events (conductor.client_events.GenerateEvents: GenerateEvent messages)."""
        model = served_model(self.service.served, request.model)
        executor = self.service.executors.get(model.name)
        if executor is None:
            raise Unavailable(f"model {model.name!r} is still starting")
        t0 = time.perf_counter()
        meter = RequestMeter(self.service.metrics, model, t0)
        outcome = "failed"
        selector, report = self.service.selectors.get(model.name), {} if report is None else report
        request_id = ""
        try:
            tokenizer = self.service.tokenizers.get(model.name)
            parsed = await self.service.intake.parse(request, model, tokenizer)  # before any work, off the loop
            events = RequestEvents(model, self.service.outputs, parsed.request_id,
                                   tokenizer if model.decode_text else None, parsed.wanted, t0,
                                   prompt_tokens=_num_ids(parsed.inputs), form=form)
            request_id, events.report = parsed.request_id, report
            uses = self.service.contexts.begin(request_id, parsed.params, context.invocation_metadata(), selector,
                                               lambda: _prompt_ids(parsed.inputs))
            report["keeping"] = uses[0].keep_id if uses else ""
            inputs = self.service.contexts.with_held_media(parsed.inputs, uses, report)
            hold = TextHold(model.max_held_text if hold_text and events.wants_audio else 0, form.is_text)
            playback = Playback(model.sample_rate, time.time(), model.ttfa_target_s) \
                if model.pacing and model.sample_rate else None
            meter.playback = playback
            admission = self.service.admission
            async with admission.admit(model.name, playback) as meter.waited_s:  # waits for a slot, or Overloaded
                if playback is not None:
                    playback.admitted(time.time())
                silent = parsed.wanted.silent(model.output_kinds, model.output_names)
                stream = executor.generate_batches(parsed.request_id, inputs, parsed.params,
                                                   parsed.wanted.kinds(model.output_kinds), playback, silent,
                                                   uses, report)
                async with contextlib.aclosing(stream):
                    async for outputs in stream:
                        batch, played = [], []
                        for name, value in outputs:
                            if isinstance(value, RowsView):
                                if not meter.counts(name):  # its events straight from the rows
                                    batch += events.of_rows(name, value, time.perf_counter())
                                    continue
                                values = value.refs()
                            else:
                                values = (value,)
                            for value in values:
                                batch += await self._events_of(events, meter, name, value)
                                if playback is not None and name in meter.audio_outputs:
                                    played.append(numel(value))
                        batch = hold.batch(batch)
                        if batch:
                            yield batch
                        for samples in played:  # once sent
                            self._played(model.name, executor, parsed.request_id, playback, samples)
            outcome = "ok"
        except RequestFailed as e:  # a node's failure: the request's field first, not where it was found
            raise client_failure(e, request) from None
        except (asyncio.CancelledError, GeneratorExit):  # the call was cancelled, or closed while it waited to write
            outcome = "cancelled"
            raise
        finally:
            meter.end(outcome, time.perf_counter())
            if selector is not None and request_id:
                selector.release(request_id)  # its pins and context affinity
            self.service.contexts.end(report)
        yield hold.rest() + events.end(time.perf_counter())

    @staticmethod
    async def _events_of(events: RequestEvents, meter: RequestMeter, name: str, value) -> list:
        now = time.perf_counter()
        meter.output(name, value, now)
        if events.is_heavy(name):  # PNG encoding: off the event loop other streams share
            return await asyncio.to_thread(events.of, name, value, now)
        return events.of(name, value, now)

    def _played(self, model: str, executor: Executor, request_id: str, playback: Playback, samples: int) -> None:
        """An audio chunk was sent: the stream's playback origin may move (re-time its work
        everywhere), and the model's measured capacity may grow (admit waiters)."""
        now = time.time()
        origin = playback.on_audio(samples, now)
        if origin is not None:
            executor.repace(request_id, origin)
        self.service.admission.on_audio(model, now)

    @map_errors
    async def ListModels(self, request, context):
        tokenizers = self.service.tokenizers
        return pb.ListModelsResponse(models=[model_info(m, m.name in tokenizers) for m in self.service.models])


def _prompt_ids(inputs: dict, limit: int = 16384) -> list[int]:
    """The leading prompt ids when the conductor holds them as a tensor (it tokenized the
    text, or parsed the ids), for prefix-aware replica choice; [] for a client's TensorRef."""
    ids = inputs.get("input_ids")
    if not ids or not callable(getattr(ids[0], "numel", None)):
        return []
    return ids[0].reshape(-1)[:limit].tolist()


def _num_ids(inputs: dict) -> int:
    """Prompt tokens for Usage: input_ids as a tensor (ids the conductor parsed) or as a
    client's TensorRef (whose numel is a property)."""
    ids = inputs.get("input_ids")
    return numel(ids[0]) if ids else 0


class ConductorService:
    """runtime.server.HostedService for the conductor: one executor per model,
    each holding one Run stream per replica, opened when the server starts.

    Health: besides the server's own, one health name per model (the model's name),
    SERVING while every service the model needs has a serving replica (one gRPC health
    watch per replica, conductor.replica_health).

    Membership: a service whose replicas come from DNS (ServiceSpec.dns) gains and drains
    replicas while it runs (conductor.membership): a joining replica gets a Run stream
    and a health watch, and takes requests once SERVING; one that leaves takes no new
    requests and its stream closes once no open request reached it.

    tls: the runtime.tls.TlsConfig of the Run streams to replicas (None: plaintext);
    api_key: the token every Conductor call must carry (conductor/auth.py); "" for none."""

    service_names = (CONDUCTOR_SERVICE, SESSIONS_SERVICE)
    event_loop = "uvloop"  # it only moves messages: the loop's cost per message is its cost (core.event_loop)

    def __init__(self, models: list[ServedModel], telemetry=None, metrics: ConductorMetrics | None = None,
                 limits: InputLimits | None = None, tls=None, api_key: str = "",
                 admission: Admission | None = None, run_timeout_s: float = 10.0,
                 max_message_bytes: int = 64 << 20, intake: IntakeConfig | None = None,
                 sessions: SessionLimits | None = None) -> None:
        """limits: what one request may carry (conductor.input_limits); intake: how many
        requests are parsed at once, off the event loop (conductor.request_intake); admission: every
        request limit (default limits per model when None); run_timeout_s: a request a
        replica stopped listing in its heartbeats fails then; max_message_bytes: the
        message limit of the Run streams to replicas (no frame passes it); sessions: what
        the Sessions service's conversations may hold (conductor.session_limits)."""
        self.models = models
        self.served = {m.name: m for m in models}
        self.limits = limits or InputLimits()
        self.intake = RequestIntake(self.limits, intake)
        self.max_message_bytes = max_message_bytes
        self.tls = tls
        self.server_interceptors = (ApiKeyInterceptor(api_key, self.service_names),) if api_key else ()
        self.telemetry = telemetry
        self.metrics = metrics
        self.admission = admission or Admission()
        if metrics is not None:
            metrics.watch_admission(self.admission, self.served)
        self.run_timeout_s = run_timeout_s
        self.executors: dict[str, Executor] = {}
        self.selectors = {m.name: ReplicaSelector(m.placement) for m in models}
        self.contexts = KeptContexts()
        self.session_limits = sessions or SessionLimits()
        self.sessions: SessionsServicer | None = None  # once registered on a server
        endpoints = {r for m in models for spec in m.placement.services.values() for r in spec.replicas}
        self.replica_health = ReplicaHealth(endpoints, self._replica_changed, tls)
        self.targets: dict[str, ReplicaTargets] = {}  # model -> its executor's streams
        dns = {name: spec.dns for m in models for name, spec in m.placement.services.items() if spec.dns}
        self.membership = Membership(dns, self._replica_joined, self._replica_left, self._sweep)
        self.outputs = ClientOutputs()
        # One tokenizer per model, loaded here once: text deltas are decoded with it.
        tokenizers = {m.name: load_tokenizer(m.name, m.tokenizer_dir) for m in models if m.tokenizer_dir}
        self.tokenizers = {name: tok for name, tok in tokenizers.items() if tok is not None}
        self._stack = contextlib.AsyncExitStack()
        self._task = None
        self._set_health = None

    def register(self, server: grpc.aio.Server) -> None:
        conductor = ConductorServicer(self)
        conductor_pb2_grpc.add_ConductorServicer_to_server(conductor, server)
        self.sessions = SessionsServicer(self, conductor, self.session_limits)  # a turn is a Generate request
        add_sessions(server, self.sessions)
        if self.metrics is not None:
            self.metrics.watch_sessions(self.sessions.open, self.served)

    def bind_health(self, set_status) -> None:
        """set_status(name, is_serving): the server's health service, for the per-model names."""
        self._set_health = set_status
        for model in self.models:
            set_status(model.name, False)  # until its executor is open

    def _replica_changed(self, endpoint: str, is_serving: bool) -> None:
        for selector in self.selectors.values():
            selector.set_serving(endpoint, is_serving)
        self._publish_health()

    def _models_on(self, service: str) -> list[str]:
        return [m.name for m in self.models if service in m.placement.services and m.name in self.targets]

    async def _replica_joined(self, service: str, endpoint: str) -> None:
        for name in self._models_on(service):
            await self.targets[name].add(endpoint)  # the stream first: the selector may choose it
            self.selectors[name].add(service, endpoint, is_serving=False)
        self.replica_health.watch(endpoint)  # SERVING makes it a candidate of its own
        self._publish_health()

    def _replica_left(self, service: str, endpoint: str) -> None:
        for name in self._models_on(service):
            self.selectors[name].retire(service, endpoint)
            self.targets[name].leave(endpoint)
        self.replica_health.unwatch(endpoint)
        self._publish_health()

    async def _sweep(self) -> None:
        for name, targets in self.targets.items():
            executor = self.executors.get(name)
            in_use = {e for run in executor.requests.values() for e in run.reached} if executor else set()
            await targets.sweep(in_use)

    def _publish_health(self) -> None:
        if self._set_health is None:
            return
        for model in self.models:
            self._set_health(model.name, model.name in self.executors and not self.selectors[model.name].unserved())

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        self.replica_health.start()
        for model in self.models:
            tracer = self.telemetry.tracer if self.telemetry else None
            on_edge = self.metrics.edge_observer(model.name) if self.metrics is not None else None
            self.targets[model.name] = ReplicaTargets(self.max_message_bytes, self.tls)
            executor = await self._stack.enter_async_context(
                remote_executor(model.graph, model.placement, model.inner_loops, tracer,
                                lockstep_nodes=model.lockstep_nodes, on_edge=on_edge,
                                tls=self.tls, run_timeout_s=self.run_timeout_s,
                                selector=self.selectors[model.name], max_message_bytes=self.max_message_bytes,
                                targets=self.targets[model.name], pacing=model.pacing,
                                on_silent=self.replica_health.suspect))  # a hung replica: down at once
            self.executors[model.name] = executor
        self._publish_health()
        self.membership.start()

    def ready(self) -> bool:
        return len(self.executors) == len(self.models)

    async def drain(self, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while any(ex.requests for ex in self.executors.values()):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        await self.membership.close()
        await self.replica_health.close()
        await self._stack.aclose()

    def close(self) -> None:
        self.outputs.close()
        self.intake.close()
