"""The conductor's per-item work on its own, without sockets or other processes.

    python -m bench.conductor_path --json bench-results/conductor_path.json [--quick]

A real Executor runs bench.conductor's pipeline for `--requests` requests (its targets
record what it sends). Each step, service C's answer for every request
arrives as the RunResponse the mesh carries (ONE OutputBatch of `sink`, `--per-step`
items of each request); the conductor
reads it, collects it into each request's walk state, and each request's front door
makes its GenerateEventBatch message and serializes it (conductor.service's loop, with
RequestEvents). Everything runs in this thread, so process CPU per item is the path's
own, steady to a few percent (bench.conductor's figures move with the machine).

Two ways of reading, alternated per round (medians, and the median of paired ratios):
- rows: as the conductor reads a Run stream (events_from_proto(rows=True):
  WalkState.on_rows, RequestEvents.of_rows);
- entries: each output its own NodeOutput (events_from_proto(rows=False), what a
  reader that resolves outputs gets), collected and made into events one by one.
Keys: rows_us_per_item, entries_us_per_item, rows_over_entries.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time

import torch

from bench.output import print_table, write_json


class RecordingTarget:
    """Where every node runs: it keeps what the executor posts (dispatches, grants, credits)."""

    name, heartbeats, host_id = "c", False, ""

    def __init__(self) -> None:
        self.posted = 0

    def post(self, items) -> None:
        self.posted += len(items)

    def convert(self, value):
        from transport.codec import inline_ref

        return inline_ref(value)


async def one_round(items: int, requests: int, per_step: int, rows: bool) -> float:
    """CPU microseconds per item of `requests` requests of `items` items, `per_step` of
    each request's items per step."""
    from bench.conductor_toys import PIPELINE_INNER_LOOPS, pipeline_graph
    from conductor.executor import Executor
    from conductor.executor_hooks import ExecutorHooks
    from runtime import item_proto as wire
    from runtime.items import NodeOutput
    from transport.codec import inline_ref

    target = RecordingTarget()
    executor = Executor(pipeline_graph(items), lambda sink: ExecutorHooks(lambda *_: target, peer_routes=True),
                        PIPELINE_INNER_LOOPS)
    rids = [f"r{i}" for i in range(requests)]
    steps = [wire.events_to_proto([NodeOutput(rid, "sink", {"z": inline_ref(torch.tensor([float(k)]))}, (k,), {}, 1.0)
                                   for rid in rids for k in range(first, min(items, first + per_step))]
                                  ).SerializeToString() for first in range(0, items, per_step)]
    readers = [asyncio.create_task(_client(executor, rid, items)) for rid in rids]
    await asyncio.sleep(0)  # every request dispatched
    cpu0 = time.process_time()
    for data in steps:
        executor.on_events(wire.events_from_proto(wire.pb.RunResponse.FromString(data), rows=rows), target)
        await asyncio.sleep(0)  # each client takes its item
    cpu = time.process_time() - cpu0
    got = await asyncio.gather(*readers)
    if got != [items] * requests:
        raise RuntimeError(f"clients got {got} events, not {items} each")
    return cpu / (items * requests) * 1e6


async def _client(executor, rid: str, items: int) -> int:
    """A request's front door: its events, one message per batch of outputs, until `items`."""
    from conductor.client_events import RequestEvents
    from conductor.client_outputs import ClientOutputs
    from protos.starmesh.v1 import conductor_pb2 as pb
    from runtime.received_rows import RowsView

    events, got = RequestEvents(_served_model(items), ClientOutputs(), rid), 0
    stream = executor.generate_batches(rid, {"n": (torch.tensor([0.0]),)})
    async with contextlib.aclosing(stream):
        async for outputs in stream:
            now, batch = time.perf_counter(), []
            for name, value in outputs:
                if isinstance(value, RowsView):
                    batch += events.of_rows(name, value, now)
                else:
                    batch += events.of(name, value, now)
            pb.GenerateEventBatch(events=batch).SerializeToString()
            got += len(batch)
            if got >= items:
                return got
    return got


def _served_model(items: int):
    """The pipeline as the conductor serves it (its placement names a replica never reached)."""
    from bench.conductor_toys import PIPELINE_INNER_LOOPS, pipeline_graph
    from conductor.model import ServedModel
    from conductor.placement import Placement

    placement = Placement.from_dict({"services": {"c": {"replicas": ["127.0.0.1:9"]}},
                                     "placement": {"src": "c", "mid": "c", "sink": "c"}})
    return ServedModel("pipe", pipeline_graph(items), placement, PIPELINE_INNER_LOOPS)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.conductor_path", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--items", type=int, default=64, help="steps: items per request")
    p.add_argument("--requests", type=int, default=16, help="requests, one item each per step")
    p.add_argument("--per-step", type=int, default=4, help="items of each request per step (one message)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="smoke run (figures not to read)")
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.requests, args.rounds = 8, 4, 1
    torch.set_num_threads(1)
    rows, entries = [], []
    for r in range(args.rounds):
        for use_rows in ((True, False) if r % 2 == 0 else (False, True)):
            (rows if use_rows else entries).append(asyncio.run(one_round(args.items, args.requests, args.per_step,
                                                                         use_rows)))
    results = {"rows_us_per_item": statistics.median(rows), "entries_us_per_item": statistics.median(entries),
               "rows_over_entries": statistics.median(a / b for a, b in zip(rows, entries)),
               "items": args.items, "requests": args.requests, "per_step": args.per_step, "rounds": args.rounds}
    print_table([("rows (the conductor's lane)", "rows_us_per_item", "us CPU per item"),
                 ("entries (one by one)", "entries_us_per_item", "us CPU per item"),
                 ("rows / entries", "rows_over_entries", "x (median of paired ratios)")], results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
