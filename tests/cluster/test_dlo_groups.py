"""A deployment's dlo_groups: the example loads, the checks name the bad key (members,
components, world size, use_allgather on members and only there), the launcher gives
each member its rank flags, `serve` turns them into the group config, and rewritten
deployments keep every member with a free rendezvous port. (Processes: tests/e2e/test_dlo_group.py.)"""
from __future__ import annotations

import copy

import pytest
import yaml

from cli.main import build_parser
from cli.serve import _dlo_group_config, _factory_kwargs, _offload_config
from cluster.deployment_dir import SHIPPED_DIR
from cluster.shipped_deployments import rewrite_shipped
from cluster.launcher import Cluster
from cluster.launchable import launchable_from_dict, read_launchable
from engine.offload.group import DloGroupConfig
from core.errors import GraphError
from cluster.registry import build_model

EXAMPLE = SHIPPED_DIR / "cfg-parallel-dlo.yaml"


def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_declares_the_cfg_parallel_pair():
    spec = read_launchable(EXAMPLE)
    group = spec.dlo_groups["cfg"]
    assert (group.world_size, group.members, group.address) == (2, ("dit", "dit_uncond"), "127.0.0.1:29500")
    placement = spec.placement("sd3")
    assert placement.lockstep_groups == {"cfg": ("dit", "dit_uncond")}
    assert build_model("sd3", "sd3", placement, {}).lockstep_nodes == {"denoise_cond", "denoise_uncond"}


def _with(change) -> dict:
    data = copy.deepcopy(example())
    change(data)
    return data


@pytest.mark.parametrize("change, match", [
    (lambda d: d["dlo_groups"]["cfg"].update(members=["dit", "nope"]),
     r"dlo_groups.cfg.members: unknown service 'nope'"),
    (lambda d: d["dlo_groups"]["cfg"].update(world_size=3), r"world_size \(3\) must equal the number of members"),
    (lambda d: d["dlo_groups"]["cfg"].update(members=["dit", "vae"]), r"service vae is a 'vae' component"),
    (lambda d: d["dlo_groups"]["cfg"].update(size=2), r"dlo_groups.cfg: unknown key\(s\) \['size'\]"),
    (lambda d: d["dlo_groups"]["cfg"].update(address="nowhere"), r"'nowhere' is not 'host:port'"),
    (lambda d: (d["services"]["dit"]["replicas"].append("127.0.0.1:50070"),
                d["services"]["dit"]["metrics"].append("127.0.0.1:51070")), r"service dit has 2 replicas"),
    (lambda d: d["services"]["dit_uncond"].pop("options"),
     r"services.dit_uncond is a member of dlo_groups.cfg: it needs options.offload.use_allgather"),
    (lambda d: d["services"]["vae"].update(options={"offload": {"use_allgather": True}}),
     r"services.vae.options.offload.use_allgather needs a dlo_groups entry"),
    (lambda d: d["services"]["dit"]["options"]["offload"].update(resident_layers=1),
     r"services.dit.options.offload.resident_layers \(1\) cannot be combined with offload.use_allgather"),
])
def test_bad_groups_are_rejected_naming_the_key(change, match):
    with pytest.raises(GraphError, match=match):
        launchable_from_dict(_with(change))


def _serve_args(argv: list[str]):
    return build_parser().parse_args(["serve", "dit", *argv])


def test_the_launcher_gives_members_their_rank_and_serve_reads_it(tmp_path):
    spec = read_launchable(EXAMPLE)
    cluster = Cluster(spec, EXAMPLE)
    cluster.checkpoints = {"sd3": tmp_path}
    argv = {name: cluster._service(spec.services[name], name, spec.services[name].replicas[0]).args
            for name in ("dit", "dit_uncond", "text")}
    assert "--dlo-group" not in argv["text"]
    for rank, name in enumerate(("dit", "dit_uncond")):
        args = _serve_args(argv[name])
        offload = _offload_config(args, _factory_kwargs(args))
        assert offload.use_allgather
        assert _dlo_group_config(args, offload) == DloGroupConfig("127.0.0.1:29500", rank, 2, "cfg", 60.0)


def test_serve_flags_go_together_and_need_allgather_offload():
    args = _serve_args(["--dlo-group", "127.0.0.1:29500", "--dlo-rank", "0"])
    with pytest.raises(ValueError, match="missing --dlo-world"):
        _dlo_group_config(args, None)
    args = _serve_args(["--dlo-group", "127.0.0.1:29500", "--dlo-rank", "0", "--dlo-world", "2", "--offload"])
    with pytest.raises(ValueError, match="--dlo-group needs --offload use_allgather=true"):
        _dlo_group_config(args, _offload_config(args, {}))
    assert _dlo_group_config(_serve_args([]), None) is None


def test_rewritten_deployments_keep_every_member_on_a_free_rendezvous_port(tmp_path):
    path = rewrite_shipped("cfg-parallel-dlo", {"sd3": str(tmp_path)}, ("sd3",), str(tmp_path))
    spec = read_launchable(path)
    assert spec.dlo_groups["cfg"].members == ("dit", "dit_uncond")
    assert spec.dlo_groups["cfg"].address != "127.0.0.1:29500"
    assert set(spec.services) == {"text", "dit", "dit_uncond", "vae"}
