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


# Session-scoped component services (echo, flaky) for tests/services.
pytest_plugins = ("tests.fixtures.service_plugin",)
