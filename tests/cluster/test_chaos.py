"""Chaos under load, against one `starmesh up` (a subprocess, speech and image models,
seven processes) for the whole module: SIGKILL of one service process of each kind in
turn while 16 mixed requests run. Only requests with state on it fail, with UNAVAILABLE
naming it; the others finish; the supervisor restarts it on its port and it serves
again; nothing is left behind (no open request, KV block, lease or arena segment).
Then the talker stopped by SIGSTOP while it holds requests: they fail UNAVAILABLE naming
it, the conductor reports the model NOT_SERVING, the supervisor finds the talker hung (its
liveness probe goes unanswered), kills it and restarts it on its port, and the model
serves again (a process that merely works hard is not restarted: test_liveness_probe.py).
The last test SIGKILLs `up` itself: no child survives it.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from bench.chaos_hung import VICTIM, not_serving, when_busy
from bench.kill_round import SPEECH_MODEL, kill_round, speech_request, wait_model_serving
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


@pytest.mark.timeout(600)
def test_a_stopped_talker_fails_its_requests_goes_not_serving_and_is_restarted(up):
    address = up.endpoints[VICTIM]
    restarts = up.supervision()[VICTIM]["restarts"]

    async def stop_it() -> tuple[int, list]:
        requests = [asyncio.create_task(speech_request(up.conductor)) for _ in range(2)]
        await when_busy(address, up.member_tls)
        pid = up.supervision()[VICTIM]["pid"]
        os.kill(pid, signal.SIGSTOP)
        await not_serving(up.conductor, pid)  # the model's health says so
        return pid, await asyncio.gather(*requests)

    pid, outcomes = asyncio.run(stop_it())
    failed = [o for o in outcomes if o.code != "OK"]
    assert failed, outcomes  # it was stopped holding one
    assert all(o.code == "UNAVAILABLE" and address in o.details for o in failed), failed
    entry = up.wait_restarted(VICTIM, restarts + 1, timeout_s=180)
    assert entry["last_exit"].startswith("hung: no answer to 3 health probes"), entry
    assert any(f"{VICTIM} (pid {pid}) did not answer its health probe" in line for line in up.lines)
    _register(up)  # the restarted talker has a new arena
    wait_model_serving(up.conductor, SPEECH_MODEL, timeout_s=120)
    assert asyncio.run(speech_request(up.conductor)).code == "OK"


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
