"""One `starmesh up` of the default deployment (every model, tiny checkpoints, free ports,
`--verbose --prometheus-config`), started once per session by the `local_up` fixture
(tests/cluster/conftest.py) for the tests that need the whole mesh as users run it:
test_up.py (requests, then a clean stop), test_dashboards.py (the metric families every
process declares) and test_deployments.py (the default layout's audio, which the other
layouts must give). At start it serves one speech and one image request through the
CLI's paths, one BAGEL image that keeps its context (with what `starmesh status` and the
backbone's /metrics show before and after it: test_bagel_status.py), and reads every
process's /metrics, so what those tests read does not depend on their order; stop() is
test_up's, and the fixture's teardown when nothing stopped it."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from client.speech import speak
from cluster import supervision_file
from cluster.shipped_deployments import rewrite_shipped
from engine.models.qwen3_omni.tiny import chat_prompt
from tests.fixtures import registry, tiny_bagel, tiny_orpheus, tiny_sd3, tiny_vjepa2
from tests.fixtures.exposition_lint import scrape
from tests.fixtures.processes import children, printed_endpoints, wait_for_line
from tests.fixtures.services import describe


# The speech request served at start (test_deployments.py sends the same one to the other layouts)
SPEECH_PROMPT, SPEECH_PARAMS = "Hello there", {"max_new_tokens": 12, "max_frames": 40}


@dataclass
class LocalUp:
    up: subprocess.Popen
    directory: Path
    lines: list[str]  # what `up` printed up to "Ctrl-C stops everything"
    endpoints: dict[str, str]  # process -> gRPC address (the gateway: its http:// URL)
    metrics: dict[str, str]  # process -> its /metrics URL
    children: list[int]
    arenas: set[str]  # the services' shared-memory arenas
    speech: object = None  # client.speech's summary of the speech request (SPEECH_PROMPT, SPEECH_PARAMS)
    image: subprocess.CompletedProcess | None = None  # `starmesh imagine`
    families: dict[str, dict[str, str]] = field(default_factory=dict)  # process -> {family: type}, after both
    stopped: tuple[int, str] | None = None  # (exit code, what it printed while stopping)
    tls: object = None  # what reaches the services: the member certificates `up` made (runtime.tls)
    deployment: Path | None = None  # the file `up` runs
    bagel: dict = field(default_factory=dict)  # _keep_a_bagel_context's record

    @property
    def prometheus_config(self) -> Path:
        return self.directory / "prometheus.yml"

    def stop(self) -> tuple[int, str]:
        """SIGTERM once, then its exit code and the rest of its output (cached)."""
        if self.stopped is None:
            for address in self._services():
                registry.unregister(address)
            self.up.send_signal(signal.SIGTERM)
            rest = self.up.communicate(timeout=120)[0]
            self.stopped = (self.up.returncode, rest)
        return self.stopped

    def _services(self) -> list[str]:
        return [a for name, a in self.endpoints.items() if name not in ("conductor", "gateway")]


def start_local_up(tiny_omni, directory: Path) -> LocalUp:
    checkpoints = {"omni": str(tiny_omni), "sd3": tiny_sd3.checkpoint(), "vjepa2": tiny_vjepa2.checkpoint(),
                   "orpheus": tiny_orpheus.checkpoint(), "bagel": tiny_bagel.checkpoint()}
    path = rewrite_shipped("local", checkpoints, directory=str(directory))
    env = {**os.environ, "STARMESH_CACHE": str(directory / "cache")}
    up = subprocess.Popen([sys.executable, "-m", "cli", "up", "--deployment", str(path), "--verbose",
                           "--prometheus-config", str(directory / "prometheus.yml")], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = wait_for_line(up, "Ctrl-C stops everything", 300)
        mesh = LocalUp(up, directory, lines, printed_endpoints(lines), _printed_metrics(lines), children(up.pid),
                       set())
        mesh.deployment = Path(path)
        mesh.tls = supervision_file.member_tls_of(mesh.endpoints["conductor"], directory / "cache")
        mesh.arenas = {describe(a, mesh.tls).arena for a in mesh._services()}
        for address in mesh._services():  # the leak check expects their arenas to outlive each test
            registry.register(address, describe(address, mesh.tls).arena, mesh.tls)
        _serve_requests(mesh)
        _keep_a_bagel_context(mesh)
        mesh.families = {name: declared_families(scrape(url)) for name, url in mesh.metrics.items()}
    except BaseException:
        up.kill()
        up.communicate(timeout=60)
        raise
    return mesh


def _serve_requests(mesh: LocalUp) -> None:
    """One spoken answer through the SDK and one image through `starmesh imagine`."""
    conductor = mesh.endpoints["conductor"]
    mesh.speech = asyncio.run(speak(conductor, "qwen3-omni", chat_prompt(SPEECH_PROMPT), SPEECH_PARAMS))
    mesh.image = subprocess.run([sys.executable, "-m", "cli", "imagine", "--conductor", conductor, "--prompt",
                                 "a fox", "-o", str(mesh.directory / "fox.png"), "--steps", "2", "--size", "64x64",
                                 "--json"], capture_output=True, text=True, timeout=120)


def _keep_a_bagel_context(mesh: LocalUp) -> None:
    """`starmesh imagine --model bagel --param keep_context=true`; the bagel backbone's
    /metrics samples before and after it, and `starmesh status` (its --json rows and its
    lines) after it, as a user runs them (the running `up`'s cache: its member certificates)."""
    from prometheus_client.parser import text_string_to_metric_families

    def samples() -> dict[str, float]:
        return {s.name: s.value for f in text_string_to_metric_families(scrape(mesh.metrics["bagel"]))
                for s in f.samples if s.labels.get("service") == "bagel"}

    env = {**os.environ, "STARMESH_CACHE": str(mesh.directory / "cache")}
    status = [sys.executable, "-m", "cli", "status", "--deployment", str(mesh.deployment)]
    mesh.bagel["before"] = samples()
    mesh.bagel["image"] = subprocess.run(
        [sys.executable, "-m", "cli", "imagine", "--model", "bagel", "--conductor", mesh.endpoints["conductor"],
         "--prompt", "a fox", "-o", str(mesh.directory / "bagel.png"), "--steps", "2", "--size", "64x64",
         "--param", "keep_context=true", "--json"], capture_output=True, text=True, timeout=120)
    mesh.bagel["after"] = samples()
    mesh.bagel["rows"] = subprocess.run([*status, "--json"], env=env, capture_output=True, text=True, timeout=60)
    mesh.bagel["lines"] = subprocess.run(status, env=env, capture_output=True, text=True, timeout=60)


def _printed_metrics(lines: list[str]) -> dict[str, str]:
    """process -> /metrics URL from `up`'s endpoint lines ("  NAME  ADDRESS  metrics URL")."""
    out = {}
    for line in lines:
        words = line.split()
        if line.startswith("  ") and len(words) == 4 and words[2] == "metrics" and words[3].startswith("http"):
            out[words[0]] = words[3]
    return out


def declared_families(text: str) -> dict[str, str]:
    """family -> type of every `# TYPE` line: a labelled family with no samples yet counts."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out[name] = kind.strip()
    return out
