"""Shared fixtures. The autouse leak check runs after every test of every issue."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")

SHM_DIR = "/dev/shm"


def _segments() -> set[str]:
    return {n for n in os.listdir(SHM_DIR) if "starmesh-" in n}


@pytest.fixture(autouse=True)
def no_leaks(request):
    """After each test: every open arena (in-process and in registered services) is
    empty, and the test left no new starmesh segment in /dev/shm."""
    from tests.fixtures import registry
    from tests.fixtures.services import wait_until
    from tests.fixtures.shm_owners import our_segments

    before = _segments()
    yield
    from transport.transport import live_transports

    def arenas_empty() -> bool:
        local = all(t.arena.num_leases == 0 for t in live_transports())
        return local and all(n == 0 for n in registry.remote_lease_counts())

    assert wait_until(arenas_empty), (
        f"arenas not empty after {request.node.name}: "
        f"{[t.stats() for t in live_transports()]} remote={registry.remote_lease_counts()}"
    )
    expected = before | registry.session_segments()

    def leaked() -> set[str]:
        return our_segments(SHM_DIR, _segments() - expected)

    assert wait_until(lambda: not leaked()), f"{request.node.name} left shm segments: {sorted(leaked())}"


@pytest.fixture(scope="session")
def tiny_omni(tmp_path_factory):
    """The tiny random Qwen3-Omni checkpoint (thinker + talker + code2wav), built once."""
    from engine.models.qwen3_omni.tiny import make_tiny_omni

    return make_tiny_omni(tmp_path_factory.mktemp("omni") / "ckpt")


@pytest.fixture(scope="session")
def local_up(tmp_path_factory):
    """`starmesh up` of the default deployment, as users run it (tests/cluster/local_up.py)."""
    from tests.cluster.local_up import start_local_up

    mesh = start_local_up(tmp_path_factory.mktemp("local-up"))
    yield mesh
    mesh.stop()


STOPS_LOCAL_UP = "stops_local_up"


def pytest_configure(config):
    config.addinivalue_line("markers", f"{STOPS_LOCAL_UP}: stops the session's `local_up` (runs after its other "
                                       "tests)")


def pytest_collection_modifyitems(config, items):
    """The tests of the session's `local_up` run last, together, so that its fifteen
    processes live only while they run, and those that stop it after the others."""
    def uses(item) -> bool:
        return "local_up" in getattr(item, "fixturenames", ())

    users = [i for i in items if uses(i)]
    stoppers = [i for i in users if i.get_closest_marker(STOPS_LOCAL_UP)]
    items[:] = [i for i in items if not uses(i)] + [i for i in users if i not in stoppers] + stoppers


# Session-scoped component services (echo, flaky) for tests/services.
pytest_plugins = ("tests.fixtures.service_plugin",)
