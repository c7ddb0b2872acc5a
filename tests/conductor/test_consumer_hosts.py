"""Where a run's outputs go, per output port: the ports a walk output (or a stop rule
the conductor evaluates) reads are client ports, sent inline; the hosts a run is given
are those of the services that read its other ports, never the client's marker.

On the Qwen3-Omni speech walk, prefill feeds both the client (its first token) and the
talker (prompt rows [n, hidden]): only the token is a client port, so the rows go by
reference (shared memory on one host, Mooncake across)."""
from __future__ import annotations

import torch

from conductor.dispatch import Dispatch
from conductor.executor_setup import consumer_hosts
from conductor.targets import RemoteTarget, run_item
from conductor.walk_scope import WalkScope
from graph.composites import DynamicLoop, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk
from pipelines.qwen3_omni.graph import INNER_LOOPS, speech_graph
from pipelines.qwen3_omni.model import speech_placement
from runtime.items import OpenNode
from transport.config import CLIENT_HOST

THINKER, TALKER, CODEC = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


def _targets(hosts: dict[str, str]) -> dict[str, RemoteTarget]:
    """Run streams to the replicas, their host ids as Describe reports them."""
    targets = {}
    for address, host in hosts.items():
        target = targets[address] = RemoteTarget(address, sink=lambda events, target: None)
        target.host_id = host
    return targets


def test_the_speech_walk_sends_only_walk_outputs_to_the_client():
    speak = speech_graph().walk_by_name["speak"]
    scope = WalkScope(speak, INNER_LOOPS)
    assert scope.client_ports == {"prefill": ("token",), "decode": ("token",), "talker": ("codes",),
                                  "code2wav": ("audio",)}
    chat = WalkScope(speech_graph().walk_by_name["chat"], INNER_LOOPS)
    assert chat.client_ports == {"prefill": ("token",), "decode": ("token",)}


def test_hosts_are_the_consuming_services_and_never_the_client():
    speak = speech_graph().walk_by_name["speak"]
    placement = speech_placement([THINKER], [TALKER], [CODEC])
    targets = _targets({THINKER: "host-a", TALKER: "host-b", CODEC: "host-b"})
    # prefill's token feeds decode (the thinker) and the client; its rows feed the talker
    assert consumer_hosts(speak, placement, targets, "prefill") == ("host-a", "host-b")
    assert consumer_hosts(speak, placement, targets, "code2wav") == ()  # the client alone
    same_host = _targets({THINKER: "host-a", TALKER: "host-a", CODEC: "host-a"})
    assert consumer_hosts(speak, placement, same_host, "prefill") == ("host-a",)
    for node in ("prefill", "decode", "talker", "code2wav"):
        assert CLIENT_HOST not in consumer_hosts(speak, placement, targets, node)


def test_a_stop_rule_the_conductor_evaluates_reads_its_port_by_value():
    """check.stop feeds no edge, but the conductor's loop reads it: a client port; a loop
    inside its component stops there, so its watched port is not one."""
    nodes = [N("inc", ("x",), ("x",)), N("check", ("x",), ("stop",)), N("emit", ("x",), ("y",))]
    loop = DynamicLoop("l", Sequential("inc", "check"), max_iters=4, carry=[E("inc.x", "inc.x")],
                       stop=StopRule("check.stop", predicate=lambda v: bool(v.any())))
    walk = Walk("w", Sequential(loop, "emit"), [E("input.x", "inc.x"), E("inc.x", "check.x"), E("inc.x", "emit.x"),
                                               E("emit.y", "output.y")])
    assert WalkScope(walk).client_ports == {"check": ("stop",), "emit": ("y",)}
    gen = DynamicLoop("gen", "decode", max_iters=4, stop=StopRule("decode.tok", stop_token_ids=(0,)))
    inner = Walk("g", Sequential(gen, "emit"), [E("input.tok", "decode.tok"), E("decode.tok", "emit.x"),
                                                E("emit.y", "output.y")])
    assert WalkScope(inner, frozenset({"gen"})).client_ports == {"emit": ("y",)}
    assert WalkScope(inner).client_ports == {"decode": ("tok",), "emit": ("y",)}  # the conductor drives it


def test_the_open_item_carries_the_client_ports_beside_the_hosts():
    """run_item (what the executor sends a replica) fills client_ports from the walk."""
    speak = speech_graph().walk_by_name["speak"]
    scope = WalkScope(speak, INNER_LOOPS)
    dispatch = Dispatch("prefill", (), {"input_ids": (torch.tensor([1, 2, 3]),)})
    item = run_item("r", "speak", dispatch, {}, lambda v: v, scope=scope, consumer_host_ids=("host-a", "host-b"))
    assert isinstance(item, OpenNode)
    assert item.consumer_host_ids == ("host-a", "host-b") and item.client_ports == ("token",)
