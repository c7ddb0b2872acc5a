"""The TLS and API-key examples of the README and docs/security.md, run as written
(tests/e2e/test_readme_examples.py lists them in ELSEWHERE: they need certificates and
an `up` with a key).

docs/security.md's openssl recipe makes the certificates in the working directory; FILE is
the colocated deployment serving qwen3-omni on free ports with `tls:` naming those files;
`STARMESH_API_KEY=s3cret starmesh up` (no file) gets the same deployment without `tls:`.
As in test_readme_examples, 127.0.0.1:50050 becomes the conductor of the `up` the example
talks to, `DIR` and `serve thinker ...` the tiny Qwen3-Omni checkpoint, and a server
(`serve`, `conductor`) runs on a free port until it answers, then SIGTERM stops it cleanly.
Each run also checks the key is needed: the same call without it is refused.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml

from tests.e2e.default_up import READY, Output, run_env, trouble
from tests.e2e.doc_examples import REPO, Example, distinct, documented_examples
from tests.e2e.readme_inputs import checkout_commands
from tests.e2e.served_example import exec_form, grpc_serving, serve_as_written
from tests.e2e.test_readme_examples import ELSEWHERE
from tests.fixtures.processes import printed_endpoints

pytestmark = pytest.mark.timeout(600)
KEY = "s3cret"  # the documents' key
PATTERN = next(p for p, _why, test in ELSEWHERE if test == "tests/e2e/test_tls_examples.py")
EXAMPLES = [e for e in documented_examples() if re.search(PATTERN, e.text, re.M)]
# what each test runs, by the examples' text
CERTS, TLS_UP, PLAIN_UP = r"^openssl ", r"starmesh up --deployment FILE", r"^STARMESH_API_KEY=s3cret starmesh up\b"
PLAIN_CLIENT = r"^STARMESH_API_KEY=s3cret starmesh speak"
TLS_CLIENTS = r"starmesh (speak|health) .*--tls-ca|tls_config\("
SERVERS = r"starmesh (serve|conductor) "
ROLES = (CERTS, TLS_UP, PLAIN_UP, PLAIN_CLIENT, TLS_CLIENTS, SERVERS)


def pick(pattern: str) -> list[Example]:
    """The examples of one role; a command given twice runs once."""
    return distinct([e for e in EXAMPLES if re.search(pattern, e.text, re.M | re.S)])


def _env(root: Path) -> dict[str, str]:
    env = run_env(root)
    return {**env, "PATH": f"{checkout_commands(root)}:{env['PATH']}", "PYTHONPATH": str(REPO)}


def as_run_here(example: Example, conductor: str, deployment: Path | None, omni: Path) -> str:
    text = example.text.replace(".venv/bin/starmesh", "starmesh").replace("127.0.0.1:50050", conductor)
    text = text.replace("serve thinker ...", "serve thinker --checkpoint DIR").replace("DIR", str(omni))
    if deployment is not None:
        text = text.replace("--deployment FILE", f"--deployment {deployment}")
        text = re.sub(r"starmesh up\s*(#|$)", rf"starmesh up --deployment {deployment} \1", text, flags=re.M)
    return text


def shell(command: str, root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The documented certificate recipe, run where the other examples run."""
    root = tmp_path_factory.mktemp("tls-examples")
    for example in pick(CERTS):
        done = shell(example.text, root, _env(root))
        assert done.returncode == 0, f"{example.source}: {done.stderr[-3000:]}"
    assert {"ca.pem", "mesh.pem", "mesh.key", "client.pem", "client.key"} <= {p.name for p in root.iterdir()}
    return root


def deployment(root: Path, omni: Path, tls: bool) -> Path:
    """The colocated deployment of qwen3-omni on free ports (with `tls:` naming the certificates)."""
    from cluster.shipped_deployments import rewrite_shipped

    directory = root / ("tls" if tls else "plain")
    directory.mkdir(exist_ok=True)
    path = rewrite_shipped("colocated", {"omni": str(omni)}, ("qwen3-omni",), str(directory))
    if tls:
        data = yaml.safe_load(path.read_text())
        data["tls"] = {"cert": "../mesh.pem", "key": "../mesh.key", "ca": "../ca.pem"}  # relative to the file
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Up:
    """A documented `starmesh up` command, started until it serves."""

    def __init__(self, command: str, root: Path, env: dict[str, str]) -> None:
        proc = subprocess.Popen(["bash", "-c", exec_form(command)], cwd=root, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.output = Output(proc)
        try:
            self.conductor = printed_endpoints(self.output.wait_for(READY, 400))["conductor"]
        except BaseException:
            self.output.stop(signal.SIGTERM)
            raise

    def stop(self) -> None:
        text = self.output.stop(signal.SIGINT)
        assert self.output.proc.returncode == 0 and not trouble(text), text[-4000:]


def test_every_tls_example_runs_here():
    assert EXAMPLES and all(any(re.search(r, e.text, re.M | re.S) for r in ROLES) for e in EXAMPLES), \
        [e.id for e in EXAMPLES if not any(re.search(r, e.text, re.M | re.S) for r in ROLES)]
    assert all(pick(role) for role in ROLES)


def test_the_key_from_the_environment_reaches_up_and_the_client(workdir, tiny_omni):
    """`STARMESH_API_KEY=s3cret starmesh up` and a client given the key the same way."""
    env = _env(workdir)
    plain = deployment(workdir, tiny_omni, tls=False)
    up = Up(as_run_here(pick(PLAIN_UP)[0], "", plain, tiny_omni), workdir, env)
    try:
        client = {**env, "STARMESH_CONDUCTOR": up.conductor}
        for example in pick(PLAIN_CLIENT):
            command = as_run_here(example, up.conductor, plain, tiny_omni)
            done = shell(command, workdir, client)
            assert done.returncode == 0, f"{example.source}: {done.stderr[-3000:]}"
            assert (workdir / "hi.wav").read_bytes()[:4] == b"RIFF"
            refused = shell(command.replace(f"STARMESH_API_KEY={KEY} ", ""), workdir, client)
            assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr, refused.stderr[-2000:]
    finally:
        up.stop()


@pytest.fixture(scope="module")
def tls_up(workdir, tiny_omni):
    """The README's `STARMESH_API_KEY=s3cret starmesh up --deployment FILE`."""
    path = deployment(workdir, tiny_omni, tls=True)
    up = Up(as_run_here(pick(TLS_UP)[0], "", path, tiny_omni), workdir, _env(workdir))
    yield up
    up.stop()


@pytest.mark.parametrize("example", pick(TLS_CLIENTS), ids=lambda e: e.id)
def test_a_client_with_the_key_and_certificates(example, tls_up, workdir, tiny_omni):
    env = {**_env(workdir), "STARMESH_CONDUCTOR": tls_up.conductor}
    command = as_run_here(example, tls_up.conductor, None, tiny_omni)
    argv = ["bash", "-c", command] if example.lang == "sh" else [sys.executable, "-c", command]
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{example.source}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    if f"--api-key {KEY}" in command:  # without the key it is refused; health needs none
        refused = shell(command.replace(f"--api-key {KEY}", ""), workdir, env)
        assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr, refused.stderr[-2000:]


@pytest.mark.parametrize("example", pick(SERVERS), ids=lambda e: e.id)
def test_a_server_with_certificates(example, workdir, tiny_omni):
    """`serve` and `conductor` with the recipe's certificates (and the key): a client with
    the client certificate finds it SERVING; with the key, a call without it is refused."""
    from runtime.tls import TlsConfig

    path = deployment(workdir, tiny_omni, tls=True)  # its own ports: the conductor binds the file's
    command = as_run_here(example, "", path, tiny_omni)
    client = TlsConfig(str(workdir / "client.pem"), str(workdir / "client.key"), str(workdir / "ca.pem"))
    serving = grpc_serving(client)
    probe = (lambda a: serving(a) and _refused_without_key(a, client)) if KEY in command else serving
    serve_as_written(command, workdir, _env(workdir), probe)


def _refused_without_key(address: str, tls) -> bool:
    from client.connection import Connection
    from protos.starmesh.v1 import conductor_pb2 as pb
    from protos.starmesh.v1 import conductor_pb2_grpc

    with Connection(address, "", tls).channel() as channel:
        try:
            conductor_pb2_grpc.ConductorStub(channel).ListModels(pb.ListModelsRequest(), timeout=30)
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.UNAUTHENTICATED
    return False
