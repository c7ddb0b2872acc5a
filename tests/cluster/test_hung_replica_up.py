"""`starmesh up` (the speech model, tiny checkpoint, as users run it) with its talker
stopped by SIGSTOP while it holds requests: the requests fail UNAVAILABLE naming it, the
conductor reports the model NOT_SERVING, the supervisor finds the talker hung (its
liveness probe goes unanswered), kills it and restarts it on its port, and the model
serves again. A process that merely works hard is not restarted:
tests/cluster/test_liveness_probe.py."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest

from bench.chaos_hung import VICTIM, not_serving, when_busy
from bench.kill_round import SPEECH_MODEL, speech_request, wait_model_serving
from bench.up_process import UpProcess
from cluster.shipped_deployments import rewrite_shipped
from tests.fixtures import registry
from tests.fixtures.services import describe
from transport.segment import sweep_stale_segments

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def up(tiny_omni, tmp_path_factory):
    path = rewrite_shipped("local", {"omni": str(tiny_omni)}, (SPEECH_MODEL,), str(tmp_path_factory.mktemp("hung")))
    up = UpProcess(path).start()
    try:
        _register(up)
    except BaseException:
        up.stop()
        raise
    yield up
    for address in up.endpoints.values():
        registry.unregister(address)
    up.stop()
    sweep_stale_segments()  # the killed talker's arena, if its restart did not sweep it


def _register(up: UpProcess) -> None:
    """The leak check expects each service's arena to live as long as the module."""
    tls = up.member_tls
    for name, address in up.endpoints.items():
        if name != "conductor":
            registry.register(address, describe(address, tls).arena, tls)


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
