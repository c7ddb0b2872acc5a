"""Chaos under load, against one `starmesh up` (a subprocess, speech and image models,
seven processes) for the whole module: SIGKILL of one service process of each kind in
turn while 16 mixed requests run. Only requests with state on it fail, with UNAVAILABLE
naming it; the others finish; the supervisor restarts it on its port and it serves
again; nothing is left behind (no open request, KV block, lease or arena segment).
The last test SIGKILLs `up` itself: no child survives it.
"""
from __future__ import annotations

import json
import os

import pytest

from bench.kill_round import kill_round
from bench.up_process import UpProcess
from cli.main import main
from cluster.launchable import read_launchable
from cluster.shipped_deployments import rewrite_shipped
from tests.fixtures import registry, tiny_sd3
from tests.fixtures.processes import children, is_alive, port_open
from tests.fixtures.services import describe, wait_until
from transport.segment import sweep_stale_segments

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def up(tiny_omni, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chaos")
    path = rewrite_shipped("local", {"omni": str(tiny_omni), "sd3": tiny_sd3.checkpoint()}, ("qwen3-omni", "sd3"),
                           str(tmp))
    up = UpProcess(path).start()
    try:
        up.deployment_spec, up.path = read_launchable(path), path
        _register(up)
    except BaseException:
        up.stop()  # a setup that fails leaves no `up` (and its services) running
        raise
    yield up
    for name, address in up.endpoints.items():
        registry.unregister(address)
    up.stop()
    sweep_stale_segments()  # a test that failed before its victim restarted leaves the dead arena


def _register(up) -> None:
    """The leak check expects each service's arena to live as long as the module."""
    for name, address in up.endpoints.items():
        if name != "conductor":
            registry.register(address, describe(address, up.member_tls).arena, up.member_tls)


@pytest.mark.parametrize("victim", ["thinker", "talker", "codec", "dit"])
def test_a_killed_service_fails_only_its_requests_and_comes_back(up, victim, capsys):
    result = kill_round(up, up.deployment_spec, victim)
    _register(up)  # the restarted victim has a new arena
    assert result.failed_unrelated == 0, [o for o in result.outcomes if o.model not in result.related]
    assert result.failed_related >= 1, result.outcomes  # it was killed holding request state
    assert not result.bad_failures, result.bad_failures
    assert any(f"{victim} (pid " in line and "died: killed by SIGKILL" in line for line in up.lines)
    assert result.served_again
    assert not result.leaked, result.leaked
    assert result.leaked_segments == 0
    capsys.readouterr()
    main(["status", "--deployment", str(up.path), "--json"])  # what the supervisor saw, as users read it
    rows = {row["service"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[victim]["restarts"] >= 1 and rows[victim]["last_exit"] == "killed by SIGKILL"
    assert rows[victim]["health"] == "SERVING" and not rows[victim]["is_crash_loop"]


def test_sigkill_of_up_leaves_no_child(up):
    pids = children(up.proc.pid)
    assert len(pids) == len(up.endpoints) + (up.gateway is not None)  # every service, the conductor, the gateway
    arenas = {describe(a, up.member_tls).arena for name, a in up.endpoints.items() if name != "conductor"}
    up.kill()
    assert wait_until(lambda: not [p for p in pids if is_alive(p)], 30), [p for p in pids if is_alive(p)]
    gateway = [up.gateway.removeprefix("http://")] if up.gateway else []
    assert wait_until(lambda: not [a for a in [*up.endpoints.values(), *gateway] if port_open(a)], 30)
    for address in up.endpoints.values():
        registry.unregister(address)
    sweep_stale_segments()  # what a later start does with the killed services' arenas
    assert not [a for a in arenas if os.path.exists(f"/dev/shm/{a}")]
