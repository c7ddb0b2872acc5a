"""Where a deployment's processes serve /metrics: named per replica and for the conductor
(the shipped files name every one), derived as gRPC port + 1000 when absent, checked at
load with errors naming the key; a launch binds no two on one port; the launcher passes
them on and the test rewrite moves them to free ports."""
from __future__ import annotations

import pytest

from cluster.deployment_dir import SHIPPED_DIR
from cluster.launchable import launchable_from_dict, read_launchable
from cluster.launcher import Cluster
from cluster.shipped_deployments import rewrite_shipped
from conductor.deployment_file import deployment_from_dict, read_deployment
from conductor.metrics_address import derived_metrics
from core.errors import GraphError

LAUNCHABLE = sorted(p.name for p in SHIPPED_DIR.glob("*.yaml") if not p.name.startswith("toy-"))


def _file(**conductor) -> dict:
    return {"conductor": {"address": "127.0.0.1:50050", **conductor},
            "services": {"a": {"component": "x", "replicas": ["127.0.0.1:50061", "127.0.0.1:50062"]},
                         "b": {"component": "x", "replicas": ["127.0.0.1:50063"]}},
            "models": {"m": {"pipeline": "p", "placement": {"n": "a", "o": "b"}}}}


@pytest.mark.parametrize("name", LAUNCHABLE)
def test_every_launchable_shipped_file_names_its_metrics(name):
    with open(SHIPPED_DIR / name) as f:
        text = f.read()
    spec = read_launchable(SHIPPED_DIR / name)  # with the no-shared-port check
    assert f'metrics: "{spec.conductor_metrics}"' in text
    for s in spec.services.values():
        assert all(f'"{m}"' in text for m in s.metrics), s.name
        if name != "compose.yaml":  # compose: 9464 in each container's own namespace
            assert s.metrics == tuple(derived_metrics(s.name, e) for e in s.replicas)


def test_absent_metrics_are_derived():
    spec = deployment_from_dict(_file())
    assert spec.conductor_metrics == "127.0.0.1:51050"
    assert spec.services["a"].metrics == ("127.0.0.1:51061", "127.0.0.1:51062")
    named = deployment_from_dict({**_file(metrics="127.0.0.1:9464")})
    assert named.conductor_metrics == "127.0.0.1:9464"
    assert named.bound_addresses()["services.a.metrics[1]"] == "127.0.0.1:51062"


@pytest.mark.parametrize("change, match", [
    (lambda d: d["services"]["a"].update(metrics=["127.0.0.1:9461"]), r"service a: metrics names 1 address\(es\) "
                                                                       r"for 2 replica\(s\)"),
    (lambda d: d["services"]["b"].update(metrics="127.0.0.1:9461"), r"service b: metrics must be a list"),
    (lambda d: d["services"]["b"].update(metrics=["9461"]), r"service b: metrics address '9461' is not 'host:port'"),
    (lambda d: d["services"]["b"].update(metrics=["0.0.0.0:9461"]), r"service b: metrics address 0.0.0.0:9461 "
                                                                     r"must be on the host its process binds"),
    (lambda d: d["services"]["b"].update(metrics=["127.0.0.1:50063"]), r"service b: .* is its gRPC address"),
    (lambda d: d["services"]["a"].update(metrics=["127.0.0.1:9461"] * 2), r"service a: duplicate metrics address"),
    (lambda d: d["services"]["b"].update(replicas=["127.0.0.1:65000"]), r"service b: the default metrics port of "
                                                                         r"127.0.0.1:65000 .* name one"),
    (lambda d: d["conductor"].update(metrics="localhost:9464"), r"conductor: metrics address localhost:9464 must be"),
    (lambda d: d["conductor"].update(metrix="127.0.0.1:9464"), r"conductor: unknown key 'metrix'"),
])
def test_bad_metrics_are_rejected_naming_the_key(change, match):
    data = _file()
    change(data)
    with pytest.raises(GraphError, match=match):
        deployment_from_dict(data)


def test_a_launch_binds_no_two_addresses_on_one_port():
    data = _file()
    data["services"]["b"]["replicas"] = ["127.0.0.1:51061"]  # a's first derived metrics port
    deployment_from_dict(data)  # a conductor serving it binds neither: fine to read
    with pytest.raises(GraphError, match=r"services.b.replicas\[0\] \(127.0.0.1:51061\) and "
                                         r"services.a.metrics\[0\] \(127.0.0.1:51061\) bind the same port"):
        launchable_from_dict(data)
    data = _file(metrics="0.0.0.0:50063")  # a wildcard host shares every host's ports
    with pytest.raises(GraphError, match=r"services.b.replicas\[0\] .* and conductor.metrics"):
        launchable_from_dict({**data, "conductor": {"address": "0.0.0.0:50050", "metrics": "0.0.0.0:50063"}})


def test_the_launcher_serves_each_processs_metrics_where_the_file_says(tmp_path):
    spec = read_launchable(SHIPPED_DIR / "local.yaml")
    cluster = Cluster(spec, SHIPPED_DIR / "local.yaml", log=lambda line: None)
    cluster.checkpoints = {n: tmp_path for n in spec.checkpoints}
    s = spec.services["thinker"]
    proc = cluster._service(s, "thinker", s.replicas[0], s.metrics[0])
    proc._tmp.cleanup()
    assert proc.args[proc.args.index("--metrics-port") + 1] == "51061"
    assert cluster.metrics["thinker"] == "http://127.0.0.1:51061/metrics"
    addresses = cluster.addresses()
    assert addresses["conductor metrics"] == "127.0.0.1:51050" and addresses["thinker metrics"] == "127.0.0.1:51061"


def test_the_rewrite_moves_metrics_to_free_ports(tmp_path):
    shipped = read_launchable(SHIPPED_DIR / "colocated.yaml")
    spec = read_deployment(rewrite_shipped("colocated", {"omni": str(tmp_path), "sd3": str(tmp_path)},
                                           directory=str(tmp_path)))
    moved = [spec.conductor_metrics, *(m for s in spec.services.values() for m in s.metrics)]
    assert not set(moved) & set(shipped.bound_addresses().values())
    assert len(set(spec.bound_addresses().values())) == len(spec.bound_addresses())


def test_the_documented_scrape_config_lists_the_default_deployments_targets():
    import re
    from pathlib import Path

    import yaml

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "scrape_configs" in b)
    targets = {t for c in yaml.safe_load(block)["scrape_configs"] for s in c["static_configs"] for t in s["targets"]}
    spec = read_launchable(SHIPPED_DIR / "local.yaml")
    # the gateway serves /metrics on its own HTTP address
    assert targets == {spec.conductor_metrics, spec.gateway, *(m for s in spec.services.values() for m in s.metrics)}
