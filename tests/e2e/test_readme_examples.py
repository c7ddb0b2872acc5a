"""Every example of the README and of docs/*.md runs as written against one `starmesh up`
of the default deployment (the session's `local_up`: tests/cluster/local_up.py, started as
tests/e2e/default_up.py starts it), then a Ctrl-C stops it all without an ERROR or a
traceback in any process's output.

The commands are read from the documents (tests/e2e/doc_examples.py), so an example that
changes is tested as it now reads. What the test changes, and nothing else
(tests/e2e/example_placeholders.py):

- addresses: the default deployment runs on free ports, so `127.0.0.1:8000` (gateway),
  `127.0.0.1:50050` (conductor), `--conductor HOST:PORT` and each service's shipped
  address become those, the conductor's commands find it through $STARMESH_CONDUCTOR and
  `status` gets the file; `127.0.0.1:50051` is the replica the README's `starmesh serve
  ... --port 50051` starts by hand, one served here on a free port (a service of `up`
  serves its mesh's members only);
- placeholders: `REQUEST_ID` is a request this test made, `DIR` of `generate` a tiny
  text checkpoint, `DIR` of `serve` the tiny Qwen3-Omni checkpoint `up` built, the
  example directory of `up`'s member certificates the one this `up` wrote, and
  `/var/cache/starmesh` a directory of the run, `--deployment FILE` this run's default
  deployment and `--image IMAGE` an image name; the input files (q.wav, in.png,
  clip.gif, *.npy, reqs.jsonl) are made in the working directory the commands run in,
  beside the checkout's compose/;
  a `ckpt/NAME` an example reads is made first by the documented `make-tiny` that
  writes it;
- a server (`starmesh serve`, `gateway`) runs on a free port until it answers its health
  probe, then SIGTERM must stop it cleanly (tests/e2e/served_example.py);
- a player the machine lacks (`| aplay ...`) is left off and the bytes are checked.

An example that needs another deployment or a server of its own is listed in ELSEWHERE
with the test that runs it; an example neither run nor listed fails the test. One that
runs but does not yet do what it says is in KNOWN_GAPS, a strict xfail: its fix shows.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.default_up import READY, trouble
from tests.e2e.doc_examples import REPO, Example, distinct, documented_examples
from tests.e2e.example_placeholders import as_run_here
from tests.e2e.readme_inputs import checkout_commands, make_inputs, output_files_ok
from tests.e2e.served_example import grpc_serving, http_healthy, is_server, serve_as_written

pytestmark = pytest.mark.timeout(900)

EXAMPLES = documented_examples()
# (what identifies the example, why it does not run here, the test that covers it)
ELSEWHERE = [
    (r"setup\.sh && \.venv/bin/starmesh demo", "a fresh machine's set-up", "tests/cli/test_demo_clean.py"),
    (r"setup\.sh && HF_HUB_OFFLINE=1 \.venv/bin/python -m pytest", "the whole suite: CI runs exactly this",
     ".ci/run"),
    (r"up --deployment compose/deployments/colocated\.yaml", "another deployment",
     "tests/cluster/test_deployments.py"),
    (r"serve <component", "a template, not a command", "tests/cli/test_serve_cli.py"),
    (r"STARMESH_API_KEY=s3cret|--tls-|^openssl |tls_config\(", "a deployment with certificates and an API key",
     "tests/e2e/test_tls_examples.py"),
    (r"^python -m bench\.", "a benchmark (minutes): its --quick mode runs there", "tests/bench/test_quick_modes.py"),
    (r"^docker-compose ", "docker and a network to build the images: the file is validated there",
     "tests/cluster/test_compose.py"),
    (r"^kubectl ", "a Kubernetes cluster: the manifests it applies are checked there",
     "tests/cluster/test_render_kubernetes.py"),
    (r"convert snac ~/snac_24khz", "released SNAC weights (a download): converted there as released",
     "tests/cli/test_orpheus_cli.py"),
]
# (what identifies the example, why it does not do what it says yet): strict, so a fix shows
KNOWN_GAPS: list[tuple[str, str]] = []
SLOW_SPEECH_S = 240.0


def _elsewhere(example: Example) -> tuple[str, str, str] | None:
    return next((e for e in ELSEWHERE if re.search(e[0], example.text, re.M)), None)


def _is_up(example: Example) -> bool:
    """`starmesh up` alone: the command the module's fixture runs."""
    return re.fullmatch(r"(\.venv/bin/)?starmesh up\s*(#.*)?", example.text.strip()) is not None


RUN = distinct([e for e in EXAMPLES if not _is_up(e) and _elsewhere(e) is None])  # a command given twice runs once


def _params(examples: list[Example]) -> list:
    out = []
    for e in examples:
        gap = next((why for pattern, why in KNOWN_GAPS if re.search(pattern, e.text)), None)
        marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
        out.append(pytest.param(e, id=e.id, marks=marks))
    return out


@pytest.fixture(scope="module")
def up(local_up):
    """The session's `starmesh up` of the default deployment (tests/cluster/local_up.py):
    its process, output and environment; its services are registered for the leak check."""
    return local_up.mesh


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, up) -> Path:
    """Where the examples run: their input files, the checkout's compose/, a `starmesh`,
    `python3` and `python` on PATH that are this checkout's, a tiny text checkpoint for
    `generate`, one traced request."""
    root = tmp_path_factory.mktemp("examples")
    make_inputs(root)
    checkout_commands(root)
    (root / "compose").symlink_to(REPO / "compose", target_is_directory=True)  # the checkout's deployment files
    done = _shell("starmesh make-tiny qwen3 text-dir", root, up)
    assert done.returncode == 0, done.stderr
    done = _shell("starmesh speak --model qwen3-omni --text Hello -o traced.wav --request-id readme-trace", root, up)
    assert done.returncode == 0, done.stderr
    return root


def _env(up, root: Path) -> dict[str, str]:
    path = f"{root / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**up.env, "PATH": path, "STARMESH_CONDUCTOR": up.conductor, "PYTHONPATH": str(REPO)}


def _shell(command: str, root: Path, up, timeout_s: float = SLOW_SPEECH_S) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=root, env=_env(up, root), capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.fixture(scope="module")
def served():
    """The README's `starmesh serve <component> --port 50051`: one replica started by hand."""
    from runtime.process import ServiceProcess
    from tests.fixtures import registry
    from tests.fixtures.services import describe

    proc = ServiceProcess("tests.fixtures.components:make_sum").start()
    registry.register(proc.address, describe(proc.address).arena)  # its arena outlives each test
    try:
        yield proc.address
    finally:
        registry.unregister(proc.address)
        proc.stop()


def test_every_example_runs_here_or_is_covered_elsewhere():
    from tests.bench.test_quick_modes import HEADLINES

    assert sum(_is_up(e) for e in EXAMPLES) == 2  # the README's and docs/gateway.md's: the fixture
    for pattern, _why, covered_by in ELSEWHERE:
        assert (REPO / covered_by).is_file(), covered_by
        assert any(re.search(pattern, e.text, re.M) for e in EXAMPLES), f"no example matches {pattern!r} any more"
    for pattern, _why in KNOWN_GAPS:
        assert any(re.search(pattern, e.text) for e in RUN), f"no example matches {pattern!r} any more"
    benchmarks = {m for e in EXAMPLES for m in re.findall(r"^python -m bench\.(\w+)", e.text)}
    assert benchmarks and benchmarks <= set(HEADLINES), benchmarks - set(HEADLINES)  # each one's quick mode runs
    assert len(RUN) >= 50, [e.id for e in RUN]


@pytest.mark.parametrize("example", _params(RUN))
def test_the_example_runs_as_written(example, up, workdir, served):
    tool = example.text.split()[0]
    if tool in ("grpcurl", "grpc_health_probe") and shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed here")
    _make_what_it_reads(example, up, workdir)
    if is_server(example.text):
        probe = http_healthy if "starmesh gateway" in example.text else grpc_serving()
        serve_as_written(as_run_here(example, up), workdir, _env(up, workdir), probe)
        return
    before = _snapshot(workdir)
    command = as_run_here(example, up, served)
    if example.lang == "python":
        done = subprocess.run([sys.executable, "-c", command], cwd=workdir, env=_env(up, workdir),
                              capture_output=True, text=True, timeout=SLOW_SPEECH_S)
    else:
        done = _shell(command, workdir, up)
        if "starmesh trace" in command:
            done = _until_traced(command, workdir, up, done)
    assert done.returncode == 0, \
        f"{example.source}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert not _http_error(done.stdout), f"{example.source}: {done.stdout[:2000]}"
    assert output_files_ok(command if example.lang == "sh" else "", workdir, before)
    if "/v1/chat/completions" in example.text and '"stream": true' in example.text:
        assert done.stdout.rstrip().endswith("data: [DONE]"), done.stdout[-2000:]


def _until_traced(command: str, root: Path, up, done):
    """The trace store takes the request's spans in batches: ask again until they are there."""
    deadline = time.monotonic() + 60
    while done.returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
        done = _shell(command, root, up)
    return done


def _snapshot(root: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in root.iterdir() if p.is_file()}


def _http_error(stdout: str) -> bool:
    """Whether a curl printed an OpenAI error body (curl -s exits 0 on an HTTP 400)."""
    text = stdout.strip()
    if not text.startswith("{"):
        return '"error"' in text[:200]
    try:
        return "error" in json.loads(text)
    except json.JSONDecodeError:
        return False


def _make_what_it_reads(example: Example, up, root: Path) -> None:
    """Each `ckpt/NAME` the example reads, made by the documented `make-tiny` that writes it
    (when no example before it did)."""
    for name in sorted(set(re.findall(r"\bckpt/(\w+)", example.text))):
        maker = rf"make-tiny \S+ ckpt/{name}\b"
        if (root / "ckpt" / name).exists() or re.search(maker, example.text):
            continue
        made = next(e for e in EXAMPLES if re.search(maker, e.text))
        done = _shell(as_run_here(made, up), root, up)
        assert done.returncode == 0, f"{made.source}: {done.stderr[-3000:]}"


def test_a_request_past_the_context_names_the_callers_field(up):
    """A default that fits, and a length the caller set that does not: a 400 naming the
    caller's field, in the caller's terms, not an internal node."""
    from openai import BadRequestError, OpenAI

    with OpenAI(base_url=f"http://{up.gateway}/v1", api_key="unused", max_retries=0, timeout=120) as sdk:
        cases = [
            (lambda: sdk.chat.completions.create(model="qwen3-omni", max_tokens=100_000,
                                                 messages=[{"role": "user", "content": "Hello"}]), "max_tokens"),
            (lambda: sdk.audio.speech.create(model="qwen3-omni", input="Hello there", voice="ethan",
                                             extra_body={"max_frames": 100_000}), "max_frames"),
            (lambda: sdk.audio.speech.create(model="qwen3-omni", input="Hello there " * 3000, voice="ethan"),
             "input"),
        ]
        for call, param in cases:
            with pytest.raises(BadRequestError) as refused:
                call()
            error = refused.value.body
            assert error["param"] == param and error["message"].startswith(param), error
            assert "node" not in error["message"] and "items[" not in error["message"], error


@pytest.mark.stops_local_up
def test_ctrl_c_stops_everything_without_an_error_and_start_up_is_quiet(local_up):
    """After every test of the session's `up` (tests/conftest.py): stopped as a user stops it."""
    code, text = local_up.stop()  # Ctrl-C: SIGINT (its services unregistered: nothing to ask them once stopped)
    assert code == 0, text[-3000:]
    assert not trouble(text), "\n".join(trouble(text)[:20]) + "\n" + text[-4000:]
    start = text[:text.index(READY)]
    for noise in ("Loading weights", "Unrecognized keys in `rope_parameters`", "requires torchvision", "it/s]"):
        assert noise not in start, noise
    assert "listening on" in start  # and what a user needs is still there
    listening = [line for line in start.splitlines() if "listening on" in line]
    loops = sorted(line.rsplit(", ", 1)[-1] for line in listening)  # the conductor on uvloop, services on asyncio
    assert loops == ["asyncio)"] * (len(loops) - 1) + ["uvloop)"], listening
