"""compose/: the compose files validate with docker-compose, and its containers run what
`starmesh up` runs for the default deployment (the launcher's own commands, parsed by the
starmesh CLI), wired for shared-memory tensors, health checks, Jaeger and the members'
certificates (the `mesh-ca` one-shot's volume; its command run here writes a set the
members load). Docker itself cannot run here; no container is started."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.main import build_parser
from cluster.launcher import Cluster
from cluster.launchable import read_launchable
from conductor.deployment import Deployment

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
FILE, GPU_FILE = COMPOSE / "docker-compose.yml", COMPOSE / "docker-compose.gpu.yml"
DEFAULT, IN_COMPOSE = COMPOSE / "deployments" / "local.yaml", COMPOSE / "deployments" / "compose.yaml"
CACHE = "/cache"  # STARMESH_CACHE in the containers: init builds $STARMESH_CACHE/tiny/KIND there
MESH = "/etc/starmesh/mesh"  # the `mesh` volume: the members' CA and certificate (mesh-ca writes it)


def _services(path: Path = FILE) -> dict:
    return yaml.safe_load(path.read_text())["services"]  # PyYAML resolves the `<<` merges


def _starmesh(services: dict) -> dict:
    """The services running `starmesh serve` / `starmesh conductor` (not shm, init, jaeger)."""
    return {n: s for n, s in services.items() if "entrypoint" not in s and s.get("command", [""])[0]
            in ("serve", "conductor")}


def _parsed(argv: list[str]) -> dict:
    """The CLI's view of a command line (every container serves /metrics: on 9464 in its
    own network namespace, as compose.yaml names it)."""
    ns = vars(build_parser().parse_args([str(a) for a in argv]))
    assert ns["metrics_port"] is not None, f"no --metrics-port in {argv}"
    return ns


@pytest.mark.parametrize("files", [[FILE], [FILE, GPU_FILE]], ids=["cpu", "gpu"])
def test_compose_config_validates(files):
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose; scripts/setup.sh installs it)")
    argv = [exe, *[a for f in files for a in ("-f", str(f))], "config", "-q"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_compose_deployment_is_the_default_one():
    default, compose = read_launchable(DEFAULT), read_launchable(IN_COMPOSE)
    assert compose.checkpoints == default.checkpoints
    assert compose.models == default.models

    def shape(spec):  # everything but the replicas' host names
        return {n: (s.component, s.checkpoint, [r.rpartition(":")[2] for r in s.replicas], dict(s.options),
                    s.host_id, s.mooncake, s.transport_mode) for n, s in spec.services.items()}

    assert shape(compose) == shape(default)
    assert compose.conductor.rpartition(":")[2] == default.conductor.rpartition(":")[2]


def _launcher_commands(spec: Deployment, deployment: str) -> dict[str, list[str]]:
    """compose service (a replica's host name) -> the argv `starmesh up` builds for it,
    bound to 0.0.0.0 and given the checkpoints in the compose volume."""
    cluster = Cluster(spec, deployment, log=lambda line: None)
    cluster.checkpoints = {n: Path(CACHE) / "tiny" / ck["tiny"] for n, ck in spec.checkpoints.items()}
    cluster.mesh_dir = Path(MESH)  # where start() would have written them
    out = {}
    for s in spec.services.values():
        for endpoint, metrics in zip(s.replicas, s.metrics):
            host, _, port = endpoint.rpartition(":")
            proc = cluster._service(s, host, f"0.0.0.0:{port}", f"0.0.0.0:{metrics.rpartition(':')[2]}")
            proc._tmp.cleanup()
            out[host] = ["serve", s.component, "--port", port, *proc.args]
    host, _, port = spec.conductor.rpartition(":")
    out[host] = ["conductor", "--port", port, "--deployment", deployment, "--host", "0.0.0.0",
                 *cluster._metrics_args("conductor", f"0.0.0.0:{spec.conductor_metrics.rpartition(':')[2]}"),
                 *cluster._mesh_args()]
    return out


def test_compose_services_run_the_launchers_commands():
    services = _starmesh(_services())
    conductor = services["conductor"]
    mount = next(v for v in conductor["volumes"] if v.startswith("./deployments/compose.yaml:"))
    deployment = mount.split(":")[1]  # where the conductor finds compose.yaml
    expected = _launcher_commands(read_launchable(IN_COMPOSE), deployment)
    assert sorted(services) == sorted(expected)
    for name, service in services.items():
        assert _parsed(service["command"]) == _parsed(expected[name]), name


def test_compose_gateway_runs_the_launchers_command():
    """The gateway container is the one `starmesh up` starts for compose.yaml's `gateway:`,
    in front of the conductor's container."""
    spec = read_launchable(IN_COMPOSE)
    cluster = Cluster(spec, str(IN_COMPOSE), log=lambda line: None)
    host, _, port = spec.conductor.rpartition(":")
    proc = cluster._gateway(int(port))
    proc._tmp.cleanup()
    gateway = _services()["gateway"]
    assert gateway["command"][0] == "gateway" and spec.gateway == "gateway:8000"
    parse = lambda argv: vars(build_parser().parse_args([str(a) for a in argv]))  # noqa: E731
    expected = ["gateway", "--port", spec.gateway.rpartition(":")[2], *proc.args]
    assert {**parse(gateway["command"]), "host": "gateway"} == parse(expected)
    assert gateway["depends_on"]["conductor"] == {"condition": "service_healthy"}


def test_compose_services_share_memory_health_and_tracing():
    services = _services()
    starmesh = _starmesh(services)
    assert services["shm"]["ipc"] == "shareable"
    # one 1 GiB arena per process (serve's default), sparse: the limit must hold them all
    size = re.fullmatch(r"(\d+)gb", services["shm"]["shm_size"])
    assert size and int(size.group(1)) >= len(starmesh)
    host_ids = set()
    for name, service in starmesh.items():
        assert service["ipc"] == "service:shm", name
        env = service["environment"]
        host_ids.add(env["STARMESH_HOST_ID"])  # one transport host: shm, not Mooncake
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4317", name
        port = _parsed(service["command"])["port"]
        member = [] if name == "conductor" else ["--mesh-tls", MESH]  # the conductor's port is the clients'
        assert service["healthcheck"]["test"] == ["CMD", "starmesh", "health", f"127.0.0.1:{port}", *member], name
        assert build_parser().parse_args(service["healthcheck"]["test"][2:]).command == "health"
    assert len(host_ids) == 1
    jaeger = services["jaeger"]
    assert jaeger["image"].startswith("jaegertracing/jaeger:2.")
    assert {p.split(":")[-1] for p in jaeger["ports"]} >= {"4317", "4318", "16686"}


@pytest.mark.parametrize("path", [FILE, GPU_FILE], ids=["cpu", "gpu"])
def test_compose_publishes_on_loopback_and_runs_as_a_user(path):
    services = _services(path)
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on every host address"
    if path == FILE:
        for name, service in services.items():
            if service["image"].startswith("starmesh:"):  # Jaeger's, Prometheus' and Grafana's run as their own
                assert service["user"] == "10001:10001", name
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile and "--uid 10001" in dockerfile


def test_compose_builds_the_checkpoints_into_a_volume():
    services = _services()
    init = services["init"]
    assert init["environment"]["STARMESH_CACHE"] == CACHE and f"checkpoints:{CACHE}" in init["volumes"]
    code = init["entrypoint"][-1]
    compile(code, "init", "exec")
    kinds = {ck["tiny"] for ck in read_launchable(IN_COMPOSE).checkpoints.values()}
    assert all(repr(kind) in code for kind in kinds)
    for name, service in _starmesh(services).items():
        if name != "conductor":
            assert f"checkpoints:{CACHE}:ro" in service["volumes"], name
            assert service["depends_on"]["init"] == {"condition": "service_completed_successfully"}, name


def test_gpu_profile_reserves_devices_and_keeps_the_commands():
    cpu, gpu = _services(), _services(GPU_FILE)
    for name in set(_starmesh(cpu)) - {"conductor"}:
        devices = gpu[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"], name
        if "command" in gpu[name]:  # only `device=cuda` added
            parsed = _parsed(gpu[name]["command"])
            assert parsed.pop("option") == ["device=cuda"], name
            assert parsed == {k: v for k, v in _parsed(cpu[name]["command"]).items() if k != "option"}, name


def test_dockerfile_installs_cpu_torch_before_the_project():
    lines = [line.strip() for line in (COMPOSE / "Dockerfile").read_text().splitlines()]
    text = "\n".join(lines)
    assert "ARG BASE=python:3.11-slim" in text and "FROM ${BASE}" in text
    assert "ARG TORCH_SPEC=torch==2.13.0" in text and "ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu" in text
    assert "libibverbs1 libnuma1" in text and "ARG EXTRAS=mooncake,reference" in text
    torch_at = text.index('--index-url "${TORCH_INDEX}" "${TORCH_SPEC}"')
    assert torch_at < text.index('pip install ".[${EXTRAS}]"')
    assert 'ENTRYPOINT ["starmesh"]' in text


def test_compose_members_read_the_certificates_mesh_ca_writes_once(tmp_path):
    """mesh-ca's own command writes a set (0700 directory, 0600 files) that a member
    loads; a second run keeps it (a restart keeps the mesh's CA). Every member mounts the
    volume read-only and waits for mesh-ca; the gateway, a client of the conductor's
    port, holds no member key."""
    from runtime.tls import MEMBER_NAME, member_tls

    services = _services()
    mesh_ca = services["mesh-ca"]
    assert mesh_ca["volumes"] == [f"mesh:{MESH}"] and mesh_ca["restart"] == "no"
    argv = mesh_ca["entrypoint"]
    assert argv[:3] == ["python", "-m", "cluster.mesh_ca"] and argv[3] == MESH
    directory = tmp_path / "mesh"
    command = [sys.executable, *argv[1:3], str(directory), *argv[4:]]  # its python: this checkout's
    run = lambda: subprocess.run(command, capture_output=True, text=True, timeout=60)  # noqa: E731
    first = run()
    assert first.returncode == 0, first.stderr
    ca = (directory / "ca.pem").read_bytes()
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in directory.iterdir()} == {
        "ca.pem": "0o600", "member.pem": "0o600", "member.key": "0o600"}
    assert b"PRIVATE KEY" not in first.stdout.encode() + first.stderr.encode()  # never printed
    tls = member_tls(directory)
    assert tls.server_name == MEMBER_NAME and tls.has_identity and tls.ca_pem == ca
    assert run().returncode == 0 and (directory / "ca.pem").read_bytes() == ca  # kept
    for name, service in _starmesh(services).items():
        assert f"mesh:{MESH}:ro" in service["volumes"], name
        assert service["depends_on"]["mesh-ca"] == {"condition": "service_completed_successfully"}, name
        assert _parsed(service["command"])["mesh_tls"] == MESH, name
    assert services["gateway"]["volumes"] == []
