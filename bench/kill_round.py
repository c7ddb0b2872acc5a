"""One chaos round against a running `starmesh up` (bench.up_process): mixed concurrent
speech and image requests, SIGKILL of one service process once it holds request state,
then what happened.

    result = kill_round(up, deployment, "talker")
    result.failed_unrelated      # requests of models that do not use the talker that failed
    result.bad_failures          # failures that are not UNAVAILABLE naming the talker
    result.restart_s, result.leaked_blocks, ...

Requests with state on the victim may fail (UNAVAILABLE naming its address) or, if they reach it
only after its restart, finish; requests of models that never use it must finish. After
the kill: the supervisor restarts the victim, once the conductor's health for its models
is SERVING again a new request of each succeeds, and
every service returns to no open request, no KV block, no lease; the victim's old
arena segment must be gone (its restart sweeps it).
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import grpc
import torch

from client.speech import speak
from engine.models.qwen3_omni.tiny import chat_prompt
from protos.starmesh.v1 import component_pb2, component_pb2_grpc
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from transport.codec import inline_ref
from transport.ref_proto import ref_to_proto

SPEECH_MODEL, IMAGE_MODEL = "qwen3-omni", "sd3"
# long enough that a kill finds requests in flight; small enough for a shared CPU
SPEECH_PARAMS = {"max_new_tokens": 12, "max_frames": 60, "min_frames": 60}
IMAGE_PARAMS = {"steps": 12, "guidance": 5.0, "width": 64, "height": 64, "seed": 7, "negative_prompt": "blurry"}


@dataclass
class Outcome:
    model: str
    code: str            # "OK" or the gRPC status name
    details: str = ""
    t_end: float = 0.0   # perf_counter when it finished or failed


@dataclass
class RoundResult:
    victim: str
    address: str
    outcomes: list[Outcome] = field(default_factory=list)
    related: tuple[str, ...] = ()     # models whose placement uses the victim
    t_kill: float = 0.0
    restart_s: float = 0.0            # death to SERVING again, as the supervisor measured it
    served_again: bool = False
    leaked: dict = field(default_factory=dict)  # service -> {open, kv_blocks, leases} left after the wait
    leaked_segments: int = 0

    @property
    def failed_unrelated(self) -> int:
        return sum(o.code != "OK" for o in self.outcomes if o.model not in self.related)

    @property
    def failed_related(self) -> int:
        return sum(o.code != "OK" for o in self.outcomes if o.model in self.related)

    @property
    def bad_failures(self) -> list[Outcome]:
        """Failures that are not UNAVAILABLE naming the victim's address."""
        return [o for o in self.outcomes if o.code != "OK" and not (o.code == "UNAVAILABLE" and self.address in o.details)]

    @property
    def time_to_unavailable_ms(self) -> list[float]:
        return [(o.t_end - self.t_kill) * 1e3 for o in self.outcomes if o.code == "UNAVAILABLE"]

    @property
    def leaked_blocks(self) -> int:
        return sum(v["kv_blocks"] for v in self.leaked.values())


async def speech_request(conductor: str) -> Outcome:
    try:
        await speak(conductor, SPEECH_MODEL, chat_prompt("hi"), SPEECH_PARAMS, timeout_s=300)
        return Outcome(SPEECH_MODEL, "OK", t_end=time.perf_counter())
    except grpc.aio.AioRpcError as e:
        return Outcome(SPEECH_MODEL, e.code().name, e.details() or "", time.perf_counter())


async def image_request(conductor: str, prompt: str = "a red fox in the snow") -> Outcome:
    req = pb.GenerateRequest(model=IMAGE_MODEL)
    ref_to_proto(inline_ref(torch.tensor(list(prompt.encode()), dtype=torch.uint8)), req.inputs.add(name="prompt").tensor)
    req.params.update(IMAGE_PARAMS)
    try:
        async with grpc.aio.insecure_channel(conductor) as channel:
            async for _ in conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=300):
                pass
        return Outcome(IMAGE_MODEL, "OK", t_end=time.perf_counter())
    except grpc.aio.AioRpcError as e:
        return Outcome(IMAGE_MODEL, e.code().name, e.details() or "", time.perf_counter())


REQUESTS = {SPEECH_MODEL: speech_request, IMAGE_MODEL: image_request}


def describe(address: str, tls=None) -> component_pb2.ComponentInfo:
    """tls: what reaches the service (UpProcess.member_tls)."""
    from runtime.tls import sync_channel

    with sync_channel(address, tls) as channel:
        return component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest(), timeout=10)


def service_state(address: str, tls=None) -> dict:
    """{open, kv_blocks, leases} a service holds now."""
    info = describe(address, tls)
    return {"open": info.num_open_requests, "kv_blocks": int(dict(info.load).get("kv_blocks_used", 0)),
            "leases": info.transport.num_leases}


async def _kill_when_busy(up, victim: str, address: str, timeout_s: float = 120.0) -> float:
    """SIGKILL to the victim as soon as it holds a request's state; perf_counter then."""
    deadline = time.monotonic() + timeout_s
    tls = up.member_tls
    while await asyncio.to_thread(describe_open, address, tls) == 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{victim} never held a request in {timeout_s} s")
        await asyncio.sleep(0.02)
    up.kill_child(victim)
    return time.perf_counter()


def wait_model_serving(conductor: str, model: str, timeout_s: float = 60.0) -> None:
    """Until the conductor's health for `model` is SERVING: it watches each replica's health
    and sees a restarted one only at its next check. A conductor without per-model health
    names (NOT_FOUND) has nothing to wait for."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(conductor) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(service=model), timeout=5).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return
            time.sleep(0.05)
    raise TimeoutError(f"the conductor's health for {model} not SERVING after {timeout_s} s")


def describe_open(address: str, tls=None) -> int:
    try:
        return describe(address, tls).num_open_requests
    except grpc.RpcError:
        return 0


def kill_round(up, deployment, victim: str, num_speech: int = 8, num_image: int = 8,
               settle_timeout_s: float = 60.0) -> RoundResult:
    """deployment: the launched Deployment (which models use the victim)."""
    address = up.endpoints[victim]
    related = tuple(m for m, spec in deployment.models.items() if victim in spec.services)
    result = RoundResult(victim, address, related=related)
    tls = up.member_tls
    old_arena = describe(address, tls).arena
    restarts = up.supervision()[victim]["restarts"]
    models = [SPEECH_MODEL] * num_speech + [IMAGE_MODEL] * num_image

    async def load() -> None:
        requests = [asyncio.create_task(REQUESTS[m](up.conductor)) for m in models]
        result.t_kill = await _kill_when_busy(up, victim, address)
        result.outcomes = list(await asyncio.gather(*requests))

    asyncio.run(load())
    result.restart_s = up.wait_restarted(victim, restarts + 1)["last_restart_s"]
    for model in related:
        wait_model_serving(up.conductor, model)
    result.served_again = all(asyncio.run(REQUESTS[m](up.conductor)).code == "OK" for m in related)
    services = {n: a for n, a in up.endpoints.items() if n != "conductor"}
    deadline = time.monotonic() + settle_timeout_s
    while True:
        result.leaked = {n: s for n, s in ((n, service_state(a, tls)) for n, a in services.items()) if any(s.values())}
        if not result.leaked or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    result.leaked_segments = int(os.path.exists(f"/dev/shm/{old_arena}"))
    return result
