"""TLS and token settings without a network: files read once with errors naming the flag
and the deployment key, a deployment's `tls:` paths relative to its file, what the
launcher passes to its children, and the bearer check every front door shares."""
from __future__ import annotations

import pytest
import yaml

from bench.tls_certs import make_certs
from core.bearer import bearer_metadata, check_bearer
from core.errors import GraphError, InvalidArgument, Unauthenticated
from runtime.server import ServerConfig
from runtime.tls import TlsConfig, tls_config


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_files_are_read_once_and_errors_name_the_flag(certs, tmp_path):
    tls = TlsConfig(certs.mesh_cert, certs.mesh_key, certs.ca)
    assert tls.cert_pem.startswith(b"-----BEGIN CERTIFICATE") and tls.has_identity
    with pytest.raises(InvalidArgument, match=r"--tls-cert \(tls.cert\) .*nope.pem: cannot read"):
        TlsConfig(str(tmp_path / "nope.pem"), certs.mesh_key)
    with pytest.raises(InvalidArgument, match=r"--tls-key \(tls.key\) is missing"):
        TlsConfig(certs.mesh_cert)
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(InvalidArgument, match=r"--tls-ca \(tls.ca\) .*junk.pem: not a PEM file"):
        TlsConfig(certs.mesh_cert, certs.mesh_key, str(tmp_path / "junk.pem"))
    assert tls_config() is None  # no file: plaintext
    with pytest.raises(ValueError, match="server.tls needs a certificate"):
        ServerConfig(tls=TlsConfig(ca=certs.ca))


def test_cli_args_give_a_child_the_same_files_as_absolute_paths(certs, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(certs.ca).parent)  # a child may start elsewhere: relative paths are resolved
    args = TlsConfig("mesh.pem", "mesh.key", "ca.pem").cli_args()
    assert args == ["--tls-cert", certs.mesh_cert, "--tls-key", certs.mesh_key, "--tls-ca", certs.ca]


def _deployment(tmp_path, tls: dict):
    data = {"services": {"s": {"component": "echo", "replicas": ["127.0.0.1:50070"]}},
            "models": {"m": {"pipeline": "text_generation", "placement": {"lm": "s"}}}, "tls": tls}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_deployments_tls_paths_are_relative_to_its_file(certs, tmp_path):
    from conductor.deployment_file import read_deployment

    make_certs(tmp_path / "certs")
    path = _deployment(tmp_path, {"cert": "certs/mesh.pem", "key": "certs/mesh.key", "ca": "certs/ca.pem"})
    deployment = read_deployment(path)
    assert deployment.tls.cert == str(tmp_path / "certs" / "mesh.pem") and deployment.tls.ca_pem
    for tls, message in (({"cert": "certs/gone.pem", "key": "certs/mesh.key"}, r"tls.cert\) .*gone.pem"),
                         ({"ca": "certs/ca.pem"}, "give cert and key"),
                         ({"cert": "certs/mesh.pem", "key": "certs/mesh.key", "crt": "x"}, "unknown key 'crt'")):
        with pytest.raises(GraphError, match=message):
            read_deployment(_deployment(tmp_path, tls))


def test_the_launcher_passes_tls_to_every_child_and_the_key_to_none_of_the_services(certs, tmp_path, monkeypatch):
    """Members get the member certificates start() makes (here: a directory set as it
    would), the conductor the file's TLS for its client port besides; under
    `mesh_tls: false` the services get the file's TLS."""
    from cluster.launcher import Cluster
    from conductor.deployment_file import read_deployment

    monkeypatch.delenv("STARMESH_API_KEY", raising=False)
    make_certs(tmp_path / "certs")
    path = _deployment(tmp_path, {"cert": "certs/mesh.pem", "key": "certs/mesh.key", "ca": "certs/ca.pem"})
    deployment = read_deployment(path)
    assert deployment.mesh_tls
    cluster = Cluster(deployment, path, api_key="k")
    cluster.mesh_dir = tmp_path / "members"
    proc, conductor = cluster._service(deployment.services["s"], "s", "127.0.0.1:50070"), cluster._conductor()
    assert proc.args[proc.args.index("--mesh-tls") + 1] == str(tmp_path / "members") and "--tls-ca" not in proc.args
    assert conductor.args[conductor.args.index("--tls-ca") + 1] == str(tmp_path / "certs" / "ca.pem")
    assert conductor.args[conductor.args.index("--mesh-tls") + 1] == str(tmp_path / "members")
    assert "STARMESH_API_KEY" not in proc.env and "k" not in proc.args
    cluster.mesh_dir = None  # mesh_tls: false
    plain = cluster._service(deployment.services["s"], "s", "127.0.0.1:50070")
    assert plain.args[plain.args.index("--tls-ca") + 1] == str(tmp_path / "certs" / "ca.pem")
    assert "--tls-cert" in plain.args and "--tls-key" in plain.args and "--mesh-tls" not in plain.args
    for p in (proc, conductor, plain):
        p._tmp.cleanup()


def test_mesh_tls_is_a_boolean_and_member_files_are_checked(tmp_path, capsys):
    from cli.main import main
    from cluster.mesh_ca import member_files, write_member_files
    from conductor.deployment_file import deployment_from_dict
    from runtime.tls import MEMBER_NAME, member_tls

    data = yaml.safe_load(_deployment(tmp_path, {}).read_text())
    data.pop("tls")
    assert deployment_from_dict({**data, "mesh_tls": False}).mesh_tls is False
    with pytest.raises(GraphError, match="mesh_tls must be true or false, got 'no'"):
        deployment_from_dict({**data, "mesh_tls": "no"})
    directory = write_member_files(tmp_path / "members", member_files("t"))
    tls = member_tls(directory)
    assert tls.server_name == MEMBER_NAME and tls.channel_options() == [("grpc.ssl_target_name_override",
                                                                          MEMBER_NAME)]
    assert main(["serve", "echo", "--mesh-tls", str(directory), "--tls-ca", str(directory / "ca.pem")]) == 2
    assert "--mesh-tls and --tls-cert/--tls-key/--tls-ca both" in capsys.readouterr().err  # one TLS per port
    (directory / "member.pem").write_text("not a certificate")
    with pytest.raises(InvalidArgument, match=rf"--mesh-tls {directory}: .*member.pem: not a PEM file"):
        member_tls(directory)


def test_the_bearer_check():
    check_bearer("Bearer s3cret", "s3cret")
    check_bearer("bearer s3cret", "s3cret")  # the scheme is case-insensitive
    for value, message in ((None, "missing authorization"), ("", "missing authorization"),
                           ("Basic s3cret", "Bearer scheme"), ("Bearer s3cre", "wrong api key"),
                           ("Bearer s3cretx", "wrong api key")):
        with pytest.raises(Unauthenticated, match=message):
            check_bearer(value, "s3cret")
    assert bearer_metadata("k") == (("authorization", "Bearer k"),) and bearer_metadata("") == ()
