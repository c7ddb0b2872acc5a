"""The deployment schema: one parser for both shapes of a deployment file (served models,
one model's placement), one ServiceSpec, errors naming the key."""
from __future__ import annotations

import copy

import pytest

from cluster.deployment_dir import SHIPPED_DIR
from conductor.deployment import Deployment
from conductor.deployment_file import deployment_from_dict, read_deployment
from conductor.placement import Placement
from core.errors import GraphError


def served(**changes) -> dict:
    """A valid two-model deployment; `changes` replace top-level keys."""
    d = {
        "name": "t",
        "checkpoints": {"ck": {"tiny": "toy"}},
        "services": {
            "a": {"component": "x", "checkpoint": "ck", "replicas": ["127.0.0.1:50061"]},
            "b": {"component": "x", "replicas": ["127.0.0.1:50062"], "device": "cuda:0", "components": ["n2"]},
            "r0": {"component": "dit", "replicas": ["127.0.0.1:50063"]},
            "r1": {"component": "dit", "replicas": ["127.0.0.1:50064"]},
        },
        "dlo_groups": {"g": {"address": "127.0.0.1:29500", "world_size": 2, "members": ["r0", "r1"]}},
        "models": {
            "m1": {"pipeline": "p", "placement": {"n1": "a", "n2": {"default": "b", "walks": {"w": "a"}}},
                   "kv_contexts": {"ctx": ["n1"]}, "options": {"k": 1}},
            "m2": {"pipeline": "p", "placement": {"n1": "r0"}},
        },
    }
    d.update(changes)
    return d


def rejects(data, match: str) -> None:
    with pytest.raises(GraphError, match=match):
        deployment_from_dict(data)


@pytest.mark.parametrize("path", sorted(SHIPPED_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_file_loads(path):
    deployment = read_deployment(path)
    assert deployment.models
    for name in deployment.models:
        assert isinstance(deployment.placement(name), Placement)


def test_served_models_get_their_services_and_lockstep_groups():
    deployment = deployment_from_dict(served())
    m1, m2 = deployment.placement("m1"), deployment.placement("m2")
    assert set(m1.services) == {"a", "b"} and m1.model == "m1"
    assert m1.service_for("n2", "w").name == "a" and m1.service_for("n2", "other").name == "b"
    assert m1.services["b"].device == "cuda:0" and m1.components_of("b") == ("n2",)
    assert m1.kv_context_of("n1") == "ctx" and not m1.lockstep_groups
    # a model on one rank of a dlo_group holds every rank, padded in lockstep
    assert tuple(m2.services) == ("r0", "r1") and m2.lockstep_groups == {"g": ("r0", "r1")}
    assert deployment.models["m1"].options == {"k": 1} and deployment.models["m1"].pipeline == "p"
    assert deployment.conductor == "127.0.0.1:50050" and deployment.checkpoints["ck"] == {"tiny": "toy"}
    with pytest.raises(GraphError, match=r"deployment has no model 'm3' \(models: \['m1', 'm2'\]\)"):
        deployment.placement("m3")


def test_one_service_spec_carries_both_users_keys():
    """A single-model placement may name what launches a service; the conductor keeps it."""
    d = {"services": {"s": {"replicas": ["127.0.0.1:1"], "component": "thinker", "host_id": "h", "mooncake": True,
                            "transport_mode": "shm", "options": {"max_num_seqs": 2}, "nice": 8}},
         "placement": {"n": "s"}}
    spec = Placement.from_dict(d).services["s"]
    assert (spec.component, spec.host_id, spec.mooncake, spec.transport_mode, spec.nice) == ("thinker", "h", True, "shm", 8)
    assert spec.options == {"max_num_seqs": 2} and spec.device == "cpu" and spec.checkpoint == ""


def test_a_deployment_is_immutable():
    data = served()
    deployment = deployment_from_dict(data)
    data["services"]["a"]["replicas"].append("127.0.0.1:1")
    assert deployment.services["a"].replicas == ("127.0.0.1:50061",)
    with pytest.raises(TypeError):
        deployment.services["z"] = deployment.services["a"]
    with pytest.raises(TypeError):
        deployment.models["m1"].options["k"] = 2
    assert deployment_from_dict(served()) == deployment


def _served_with(change) -> dict:
    d = copy.deepcopy(served())
    change(d)
    return d


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(placement={"n": "a"}), "deployment: key 'placement' goes with a top-level placement"),
    (lambda d: d.update(lockstep_groups={}), "deployment: key 'lockstep_groups' goes with a top-level placement"),
    (lambda d: d.update(models={}), "deployment: models is empty"),
    (lambda d: d.update(conductor={"adress": "x"}), "conductor: unknown key 'adress'"),
    (lambda d: d.update(conductor={"address": "nowhere"}), "'nowhere' is not 'host:port'"),
    (lambda d: d["models"]["m1"].update(placemnt={}), "models.m1: unknown key 'placemnt'"),
    (lambda d: d["models"]["m1"].pop("pipeline"), "models.m1: missing key 'pipeline'"),
    (lambda d: d["models"]["m1"]["placement"].update(n2={"walk": {}}), "models.m1: placement n2: unknown key 'walk'"),
    (lambda d: d["models"]["m1"]["placement"].update(n1="nope"),
     r"models.m1.placement names unknown service\(s\) \['nope'\]"),
    (lambda d: d["models"]["m1"]["placement"].update(n1="b"), r"node n1: placed on service b, which does not host"),
    (lambda d: d["models"]["m1"].update(kv_contexts={"ctx": "n1"}), "models.m1: kv_context ctx must be a list"),
    (lambda d: d["services"]["a"].update(checkpoint="nope"), "services.a.checkpoint 'nope' is not under checkpoints"),
    (lambda d: d["services"]["a"].update(replica=[]), "service a: unknown key 'replica'"),
    (lambda d: d["services"]["a"].update(nice=20), r"service a: nice must be an int in \[0, 19\], got 20"),
    (lambda d: d["services"]["a"].update(nice="8"), r"service a: nice must be an int in \[0, 19\], got '8'"),
    (lambda d: d["services"]["a"].update(replicas={"dns": "a.mesh"}), r"services.a.replicas.dns must be 'host:port'"),
    (lambda d: d["services"]["a"].update(replicas={"dns": "a.mesh:1", "refresh_s": 0}),
     r"services.a.replicas.refresh_s must be a number > 0"),
    (lambda d: d["services"]["a"].update(replicas={"dns": "a.mesh:1", "nameserver": 53}),
     r"services.a.replicas.nameserver must be 'host:port'"),
    (lambda d: d["services"]["a"].update(replicas={"dsn": "a.mesh:1"}), r"services.a.replicas: unknown key 'dsn'"),
    (lambda d: d["services"]["a"].update(replicas={"refresh_s": 1}), r"services.a.replicas: missing key 'dns'"),
    (lambda d: d["services"]["a"].update(replicas={"dns": "a.mesh:1"}, metrics=["127.0.0.1:9"]),
     r"service a: replicas come from dns a.mesh:1; list no replicas or metrics"),
    (lambda d: d["checkpoints"].update(ck={"tiny": "toy", "path": "/x"}),
     "checkpoints.ck: give exactly one of tiny or path"),
    (lambda d: d["checkpoints"].update(ck={"tin": "toy"}), "checkpoints.ck: unknown key 'tin'"),
])
def test_served_errors_name_the_key(change, match):
    rejects(_served_with(change), match)


def test_dns_replicas_parse_into_the_service():
    spec = deployment_from_dict(_served_with(lambda d: d["services"]["a"].update(
        replicas={"dns": "a.mesh.svc:50061", "refresh_s": 0.5, "nameserver": "127.0.0.1:5353"}))).services["a"]
    assert spec.replicas == () and spec.metrics == ()
    assert (spec.dns.name, spec.dns.port, spec.dns.refresh_s, spec.dns.nameserver) == \
        ("a.mesh.svc", 50061, 0.5, "127.0.0.1:5353")


def test_a_single_placement_takes_no_dlo_groups_and_needs_a_placement():
    rejects({"services": {"s": {"replicas": ["127.0.0.1:1"]}}, "placement": {"n": "s"},
             "dlo_groups": {}}, "deployment: key 'dlo_groups' goes with models, not with a top-level placement")
    rejects({"services": {"s": {"replicas": ["127.0.0.1:1"]}}}, r"missing key 'placement' \(or 'models'\)")


def test_a_placement_is_one_models():
    with pytest.raises(GraphError, match=r"deployment has models \['m1', 'm2'\]: a Placement is one model's"):
        Placement.from_dict(served())
    one = served(models={"m2": served()["models"]["m2"]})
    assert Placement.from_dict(one) == deployment_from_dict(one).placement("m2")


def test_a_dataclass_built_directly_is_checked_too():
    good = deployment_from_dict(served())
    with pytest.raises(GraphError, match="dlo_groups.g.members: service r0 has 2 replicas"):
        r0 = good.services["r0"]
        two = type(r0)(r0.name, ("127.0.0.1:50063", "127.0.0.1:50070"), component="dit")
        Deployment({**good.services, "r0": two}, good.models, checkpoints=good.checkpoints,
                   dlo_groups=good.dlo_groups)
    with pytest.raises(GraphError, match="deployment: models is empty"):
        Deployment(good.services, {}, checkpoints=good.checkpoints)
