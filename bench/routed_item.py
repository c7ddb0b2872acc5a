"""CPU per item of a service's routed-edge path, in one process, without gRPC.

    python -m bench.routed_item [--streams S] [--rounds R] [--json PATH]

A StepLoop (its engine thread, as in a service) runs bench.conductor's middle toy `mid`:
the consumer of one routed edge (FixedChunk(1), a chunk run per item) and the producer
of the next (its outputs exported and posted to a peer). A second StepLoop runs the same
toy as an item node (runtime.route_item_runs: one run per stream, its items pushed), in
alternate rounds: item_runs_us_per_item is its CPU per item, and item_runs_over_chunk_runs
the median of the rounds' paired ratios. Each batch is one PushBatch of S entries, one
per stream, as a producer's engine step sends them (runtime.push_batch); the next goes
once the peer posts of this one are out. runtime_us_per_item is this process's CPU per
item: claim, chunk run, resolve, the toy's open and step, route out, export, credit.
component_us_per_item, the baseline measured in alternate rounds, is the toy alone
(open + step of the same items, no runtime); runtime_over_component is the median of the
rounds' paired ratios.

The gRPC edge's own conversions of the same batches, measured here too (a hop pays them
on the event-loop threads of both ends, beside the engine thread's runtime_us_per_item):
encode_us_per_item (items_to_proto + SerializeToString, the producer) and
decode_us_per_item (FromString + request_from_proto, the consumer), per item, medians
over the rounds.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

from bench.output import write_json

PEER = "127.0.0.1:9"  # never dialled: the peers object below only counts posts


class CountingPeers:
    """The engine thread's peer links, reduced to a count of posted pushes."""

    def __init__(self) -> None:
        self.num_posted, self.wanted = 0, 0
        self.reached = threading.Event()

    def expect(self, wanted: int) -> None:
        self.reached.clear()
        self.wanted = wanted
        if self.num_posted >= wanted:
            self.reached.set()

    def post(self, peer: str, items: list) -> None:
        self.num_posted += sum(getattr(i, "num_entries", 1) for i in items)
        if self.num_posted >= self.wanted:
            self.reached.set()


def _grants(streams: int) -> list:
    from graph.chunking import FixedChunk
    from runtime.items import AcceptRoute, EdgeRoute, OpenNode

    out = []
    for r in range(streams):
        onward = EdgeRoute("y", "sink", "y", FixedChunk(1), window=1 << 20, peer=PEER, peer_host_id="bench-host",
                           token=f"to-c-{r}", edge="mid.y -> sink.y")
        run = OpenNode(f"req-{r}", "mid", walk="stream", consumer_host_ids=("bench-host",), routes=(onward,),
                       quiet_ports=("y",), traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        out.append((f"items[{r}]", AcceptRoute(f"to-b-{r}", run, "x", edge="src.x -> mid.x", window=1 << 20,
                                               per_item=True)))
    return out


def _batch(streams: int, k: int, value) -> list:
    """One PushBatch of `streams` entries (one item each), its rows inline."""
    from runtime.push_batch import BatchBuilder
    from transport.codec import inline_ref

    now, builder = time.time() * 1e6, BatchBuilder()
    for r in range(streams):
        builder.add(f"to-b-{r}", f"req-{r}", k, 0, 0, False, (now,), value)
    return [("items[0]", b) for b in builder.build(lambda rows, shares: inline_ref(rows))]


def runtime_round(loop, peers: CountingPeers, batches: list) -> float:
    """CPU seconds of this process for `batches`, each posted on before the next goes."""
    cpu0 = time.process_time()
    for batch in batches:
        peers.expect(peers.num_posted + sum(b.num_entries for _, b in batch))
        loop.submit("peer-a", batch)
        if not peers.reached.wait(60):
            raise RuntimeError("the engine thread posted nothing for a minute")
    return time.process_time() - cpu0


def component_round(toy, batches: list, values: dict) -> float:
    """The toy alone: open a run per push and step, as the engine thread does."""
    cpu0 = time.process_time()
    for batch in batches:
        for _, pushes in batch:
            for start in pushes.columns()["start"].tolist():
                toy.open(_run_of(start), values)
        toy.step()
    return time.process_time() - cpu0


def wire_round(batches: list) -> tuple[float, float]:
    """CPU seconds of encoding and of decoding `batches` as RunRequests, as the peer
    links' writer and the consumer's Run reader do."""
    from protos.starmesh.v1 import component_pb2 as pb
    from runtime.item_proto import items_to_proto, request_from_proto

    encoded, cpu0 = [], time.process_time()
    for batch in batches:
        encoded.append(items_to_proto([push for _, push in batch], "bench-a").SerializeToString())
    cpu1 = time.process_time()
    for data in encoded:
        request_from_proto(pb.RunRequest.FromString(data))
    return cpu1 - cpu0, time.process_time() - cpu1


def _run_of(start: int):
    from runtime.items import OpenNode

    return OpenNode("req", "mid", iteration=(start,))


def measure(streams: int, rounds: int, batches_per_round: int) -> dict:
    import torch

    from bench.conductor_toys import make_b
    from runtime.step_loop import StepLoop
    from transport.codec import inline_ref
    from transport.config import TransportConfig
    from transport.transport import Transport

    torch.set_num_threads(1)
    peers, transport = CountingPeers(), Transport(TransportConfig(host_id="bench-host"))
    loops = {form: StepLoop(make_b(item_runs=form == "items"), transport, peers=peers) for form in ("chunks", "items")}
    value, k = torch.tensor([5]), 0
    try:
        for loop in loops.values():
            loop.start()
            loop.attach("conductor", lambda events: None)
            loop.submit("conductor", _grants(streams))
            loop.name_stream("peer-a", "bench-a")
        runtime, item_runs, component, ratios, item_ratios, encode, decode = [], [], [], [], [], [], []
        for r in range(rounds + 1):  # round 0 warms both up
            batches = [_batch(streams, k + i, value.reshape(1)) for i in range(batches_per_round)]
            k += batches_per_round
            items = streams * batches_per_round
            rt = runtime_round(loops["chunks"], peers, batches) / items
            ct = component_round(make_b(item_runs=False), batches, {"x": value}) / items
            it = runtime_round(loops["items"], peers, batches) / items
            et, dt = wire_round(batches)
            if r:
                encode.append(et / items * 1e6)
                decode.append(dt / items * 1e6)
                runtime.append(rt * 1e6)
                item_runs.append(it * 1e6)
                component.append(ct * 1e6)
                ratios.append(rt / ct)
                item_ratios.append(it / rt)
    finally:
        for loop in loops.values():
            loop.stop(10)
        transport.close()
    return {"streams": streams, "rounds": rounds, "items_per_round": streams * batches_per_round,
            "runtime_us_per_item": statistics.median(runtime), "component_us_per_item": statistics.median(component),
            "runtime_over_component": statistics.median(ratios), "encode_us_per_item": statistics.median(encode),
            "decode_us_per_item": statistics.median(decode), "item_runs_us_per_item": statistics.median(item_runs),
            "item_runs_over_chunk_runs": statistics.median(item_ratios)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=16, help="pushes per message (one per stream)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batches", type=int, default=200, help="messages per round")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 streams, one round of 10 messages")
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.rounds, args.batches = 2, 1, 10
    results = measure(args.streams, args.rounds, args.batches)
    for key in ("runtime_us_per_item", "component_us_per_item", "runtime_over_component", "encode_us_per_item",
                "decode_us_per_item", "item_runs_us_per_item", "item_runs_over_chunk_runs"):
        print(f"{key:28s} {results[key]:8.2f}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
