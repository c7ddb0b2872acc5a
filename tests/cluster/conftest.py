"""Deployments started once per session: a co-located speech one (thinker + talker+codec +
conductor) with a trace store, for the cluster tests that only need a running deployment.
(`starmesh up` of the default deployment, every model and the gateway, for the tests of
what users run: the `local_up` fixture of tests/conftest.py.)"""
from __future__ import annotations

import pytest

from cluster.shipped_deployments import rewrite_shipped
from cluster.launcher import Cluster
from cluster.launchable import read_launchable
from cluster.trace_store import TraceStore
from tests.fixtures import registry
from tests.fixtures.services import describe


@pytest.fixture(scope="session")
def trace_store():
    store = TraceStore().start()
    yield store
    store.stop()


@pytest.fixture(scope="session")
def colocated(tiny_omni, tmp_path_factory, trace_store):
    path = rewrite_shipped("colocated", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path_factory.mktemp("colo")))
    cluster = Cluster(read_launchable(path), path, trace_store=trace_store.otlp_address, log=lambda line: None)
    cluster.start()
    services = [p.address for p in cluster.services]
    for address in services:  # the leak check expects their arenas to live as long as the session
        registry.register(address, describe(address, cluster.service_tls).arena, cluster.service_tls)
    yield cluster
    for address in services:
        registry.unregister(address)
    cluster.stop()
