"""Load generator of the conductor benchmark: a separate process, so the bench
process's CPU time is the conductor's alone.

    python -m bench.conductor_client ADDRESS

Reads one JSON command per stdin line, {"model", "prefix", "requests", "concurrency",
"items", "params"}, runs that many `Conductor.Generate` calls (at most `concurrency`
at a time), and answers one JSON line: {"wall_s", "items", "messages", "latency_s": [...]}
(messages: the batches the calls read, each one gRPC message).
A call ends once it has `items` tensor events; the client then closes it (a chained
streaming edge never ends its request yet: see bench.conductor).

`Client` is the bench side: it starts this process and times each phase.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

from bench.output import proc_cpu_s
from bench.pipe_child import PipeChild


def make_request(model: str, request_id: str, params: dict):
    import torch

    from protos.starmesh.v1 import conductor_pb2 as pb
    from transport.codec import inline_ref
    from transport.ref_proto import ref_to_proto

    req = pb.GenerateRequest(model=model, request_id=request_id)
    ref_to_proto(inline_ref(torch.tensor([0.0])), req.inputs.add(name="n").tensor)
    req.params.update(params)
    return req


async def one_call(stub, req, items: int) -> tuple[int, float, int]:
    t0 = time.perf_counter()
    call, got, messages = stub.GenerateBatches(req), 0, 0  # as starmesh's own clients read
    try:
        async for batch in call:
            messages += 1
            got += sum(1 for ev in batch.events if ev.WhichOneof("kind") == "tensor")
            if got >= items:
                break
    finally:
        call.cancel()
    return got, time.perf_counter() - t0, messages


async def run_phase(stub, cmd: dict) -> dict:
    reqs = [make_request(cmd["model"], f"{cmd['prefix']}-{i}", cmd.get("params", {})) for i in range(cmd["requests"])]
    limit = asyncio.Semaphore(cmd["concurrency"])

    async def bounded(req):
        async with limit:
            return await one_call(stub, req, cmd["items"])

    t0 = time.perf_counter()
    results = await asyncio.gather(*(bounded(r) for r in reqs))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "items": sum(r[0] for r in results), "latency_s": [r[1] for r in results],
            "messages": sum(r[2] for r in results)}


async def serve(address: str) -> None:
    import grpc

    from protos.starmesh.v1 import conductor_pb2_grpc

    loop = asyncio.get_running_loop()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        print(json.dumps({"ready": True}), flush=True)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                return
            print(json.dumps(await run_phase(stub, json.loads(line))), flush=True)


# ---- the bench side ------------------------------------------------------------


class Client:
    """The load-generator process; run() times one phase, this process's CPU (the
    conductor's) and that of the `watch`ed processes (services, the client)."""

    def __init__(self, address: str, watch: dict[str, int]) -> None:
        self.child = PipeChild("bench.conductor_client", (address,), "bench client")
        self.watch = {**watch, "client": self.child.pid}

    def run(self, **cmd) -> dict:
        cpu0, others0 = time.process_time(), {k: proc_cpu_s(pid) for k, pid in self.watch.items()}
        result = self.child.ask(cmd, f"phase {cmd['prefix']}")
        result["conductor_cpu_s"] = time.process_time() - cpu0
        result["other_cpu_s"] = {k: proc_cpu_s(pid) - others0[k] for k, pid in self.watch.items()}
        return result

    def close(self) -> None:
        self.child.close()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
