"""What launching adds to the deployment schema: served models only, a component per
service, offload options checked as `serve` will check them, and the device flag."""
from __future__ import annotations

import copy

import pytest
import yaml

from cluster.deployment_dir import SHIPPED_DIR
from cluster.launchable import launchable_from_dict, read_launchable
from cluster.launcher import Cluster
from core.errors import GraphError, InvalidArgument
from services.options import check_options

LOCAL = SHIPPED_DIR / "local.yaml"


def local() -> dict:
    return yaml.safe_load(LOCAL.read_text())


def test_a_top_level_placement_cannot_be_launched():
    with pytest.raises(GraphError, match="`starmesh up` needs `models:`"):
        read_launchable(SHIPPED_DIR / "toy-local.yaml")


def test_every_service_names_its_component():
    data = local()
    del data["services"]["codec"]["component"]
    with pytest.raises(GraphError, match="services.codec: missing key 'component'"):
        launchable_from_dict(data)


def test_offload_options_are_checked_at_load():
    data = local()
    data["services"]["dit"]["options"] = {"offload": {"resident_layer": 1}}
    with pytest.raises(GraphError, match=r"services.dit.options.offload: unknown option\(s\) \['resident_layer'\]"):
        launchable_from_dict(data)
    data["services"]["dit"]["options"] = {"offload": "on"}
    with pytest.raises(GraphError, match="services.dit.options.offload must be a mapping"):
        launchable_from_dict(data)
    data["services"]["dit"]["options"] = {"offload": {"resident_layers": 2}}
    assert launchable_from_dict(data).services["dit"].options["offload"] == {"resident_layers": 2}


def test_check_options():
    assert check_options({}) is None and check_options({"max_num_seqs": 2}) is None
    config = check_options({"offload": {"use_allgather": True}})
    assert config.enabled and config.use_allgather
    with pytest.raises(InvalidArgument, match=r"options.offload.resident_layers \(1\) cannot be combined"):
        check_options({"offload": {"use_allgather": True, "resident_layers": 1}})


def test_a_device_other_than_cpu_reaches_serve(tmp_path):
    data = copy.deepcopy(local())
    data["services"]["dit"]["device"] = "cuda:1"
    deployment = launchable_from_dict(data)
    cluster = Cluster(deployment, LOCAL, log=lambda line: None)
    cluster.checkpoints = {"omni": tmp_path, "sd3": tmp_path}
    args = {name: cluster._service(deployment.services[name], name, "127.0.0.1:1") for name in ("dit", "vae")}
    for proc in args.values():
        proc._tmp.cleanup()
    assert args["dit"].args[args["dit"].args.index("--device") + 1] == "cuda:1"
    assert "--device" not in args["vae"].args  # the default leaves the command as compose writes it


def test_the_local_speech_path_yields_toward_the_client(tmp_path):
    """local.yaml runs the thinker and talker at lower CPU priority than the codec after them."""
    deployment = launchable_from_dict(local())
    cluster = Cluster(deployment, LOCAL, log=lambda line: None)
    cluster.checkpoints = {"omni": tmp_path}
    procs = {name: cluster._service(deployment.services[name], name, "127.0.0.1:1")
             for name in ("thinker", "talker", "codec")}
    for proc in procs.values():
        proc._tmp.cleanup()
    nice = {name: int(p.args[p.args.index("--nice") + 1]) if "--nice" in p.args else 0 for name, p in procs.items()}
    assert nice["thinker"] > nice["talker"] > nice["codec"] == 0
