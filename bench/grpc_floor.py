"""The machine's floor under a conductor's CPU per item: a bare grpc.aio server stream.

    python -m bench.grpc_floor [--messages N] [--concurrency C] [--json PATH] [--quick]

A child process serves `Conductor.Generate` with no starmesh code behind it: each call
yields N copies of one GenerateEvent like those the conductor benchmark's client reads
(a one-element tensor event). This process reads C such calls at once; the child's CPU
time (/proc) over the messages it sent is what one streamed message costs a grpc.aio
server here, before any routing, walk state or conversion. A conductor that sends each
item as one message cannot go below it.
"""
from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from bench.output import proc_cpu_s, write_json
from core import event_loop


def _event():
    import torch

    from protos.starmesh.v1 import conductor_pb2 as pb
    from transport.codec import inline_ref
    from transport.ref_proto import ref_to_proto

    event = pb.GenerateEvent(request_id="floor-0")
    event.tensor.name = "z"
    ref_to_proto(inline_ref(torch.tensor([1.0])), event.tensor.tensor)
    return event


async def _serve(messages: int) -> None:
    import grpc

    from protos.starmesh.v1 import conductor_pb2_grpc

    event = _event()

    class Bare(conductor_pb2_grpc.ConductorServicer):
        async def Generate(self, request, context):
            for _ in range(messages):
                yield event

    server = grpc.aio.server()
    conductor_pb2_grpc.add_ConductorServicer_to_server(Bare(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def _read(address: str, concurrency: int) -> int:
    import grpc

    from protos.starmesh.v1 import conductor_pb2 as pb
    from protos.starmesh.v1 import conductor_pb2_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)

        async def one() -> int:
            return len([_ async for _ in stub.Generate(pb.GenerateRequest(model="floor"))])

        return sum(await asyncio.gather(*(one() for _ in range(concurrency))))


def floor_us_per_message(messages: int = 4000, concurrency: int = 4, rounds: int = 3) -> dict:
    """Median over rounds of the serving process's CPU microseconds per message sent."""
    import statistics

    child = subprocess.Popen([sys.executable, "-m", "bench.grpc_floor", "--serve", "--messages", str(messages)],
                             stdout=subprocess.PIPE, text=True)
    try:
        address = f"127.0.0.1:{int(child.stdout.readline())}"
        asyncio.run(_read(address, 1))  # warm: connection, first calls
        per_message, rates = [], []
        for _ in range(rounds):
            cpu0, t0 = proc_cpu_s(child.pid), time.perf_counter()
            sent = asyncio.run(_read(address, concurrency))
            wall, cpu = time.perf_counter() - t0, proc_cpu_s(child.pid) - cpu0
            per_message.append(cpu / sent * 1e6)
            rates.append(sent / wall)
    finally:
        child.kill()
        child.wait()
    return {"grpc_stream_floor_us_per_msg": statistics.median(per_message),
            "grpc_stream_floor_msgs_per_s": statistics.median(rates), "grpc_stream_floor_concurrency": concurrency}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_floor", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=4000, help="messages per call")
    p.add_argument("--concurrency", type=int, default=4, help="calls read at once")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child process
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--quick", action="store_true", help="smoke run: 200 messages per call, one round")
    args = p.parse_args(argv)
    if args.serve:  # on the loop the conductor it is the floor of runs
        event_loop.run(_serve(args.messages), "uvloop")
        return 0
    rounds = 3
    if args.quick:
        args.messages, rounds = 200, 1
    results = floor_us_per_message(args.messages, args.concurrency, rounds)
    for key, value in results.items():
        print(f"{key:32s} {value:10.1f}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
