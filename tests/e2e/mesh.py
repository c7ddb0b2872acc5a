"""A small tensor mesh for end-to-end transport tests: three echo services as
processes, and the routing a conductor does between them (forward references,
acknowledge consumed leases to their producers)."""
from __future__ import annotations

from dataclasses import dataclass

from runtime.items import Cancel, NodeDone, NodeError, NodeOutput, OpenNode, Release
from runtime.process import ServiceProcess
from tests.fixtures import registry
from tests.fixtures.services import RunStream, describe, start_side_by_side

HOST_A, HOST_B = "host-a", "host-b"
ECHO = "tests.fixtures.components:make_echo"


@dataclass
class Node:
    """One service process and the test's Run stream to it."""

    process: ServiceProcess
    stream: RunStream
    arena: str
    host_id: str

    @classmethod
    def of(cls, process: ServiceProcess, host_id: str) -> "Node":
        """The node of a SERVING echo process on `host_id`."""
        return cls(process, RunStream(process.address), describe(process.address).arena, host_id)

    def run(self, rid: str, ref, consumer_host: str):
        """Opens echo for `rid`; returns (output ref, consumed leases) or the NodeError."""
        self.stream.send(OpenNode(rid, "echo", inputs={"x": ref}, consumer_host_ids=(consumer_host,)))
        out, consumed = None, ()
        while True:
            for ev in self.stream.events(timeout_s=60):
                if isinstance(ev, NodeError):
                    return ev, ()
                if isinstance(ev, NodeOutput):
                    out = ev.tensors["x"]
                if isinstance(ev, NodeDone):
                    return out, ev.consumed

    def stop(self) -> None:
        self.stream.close()
        self.process.stop()


class Mesh:
    """P: producer that always leases (host A, Mooncake on). Q: consumer on host A.
    R: consumer on host B (Mooncake on). The test process is a client on host A."""

    def __init__(self) -> None:
        hosts = {"P": (HOST_A, "--inline-threshold", "0", "--mooncake"), "Q": (HOST_A,), "R": (HOST_B, "--mooncake")}
        procs = {name: ServiceProcess(ECHO, ["--host-id", host, *args], name=name)
                 for name, (host, *args) in hosts.items()}
        start_side_by_side(list(procs.values()))
        self.nodes = {name: Node.of(proc, hosts[name][0]) for name, proc in procs.items()}
        self.by_arena = {n.arena: n for n in self.nodes.values()}
        for node in self.nodes.values():
            registry.register(node.process.address, node.arena)

    def acknowledge(self, rid: str, consumed, local) -> None:
        """What a conductor does with a NodeDone: Release each lease at its owner."""
        for lease in consumed:
            if lease.arena == local.arena_name:
                local.release([lease.lease_id])
            else:
                self.by_arena[lease.arena].stream.send(Release(rid, (lease.lease_id,)))

    def finish(self, rid: str) -> None:
        for node in self.nodes.values():
            node.stream.send(Cancel(rid, "done"))

    def close(self) -> None:
        for node in self.nodes.values():
            registry.unregister(node.process.address)
            node.stop()
