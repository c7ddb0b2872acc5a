"""One `starmesh up` of the default deployment as users start it (tests/e2e/default_up.py:
the shipped file on free ports, its tiny checkpoints built by `up` into the run's own
cache), with `--verbose --prometheus-config`, started once per session by the `local_up`
fixture (tests/conftest.py) for the tests that need the whole mesh as users run it:
every example of the README and docs/ (tests/e2e/test_readme_examples.py), test_up.py
(requests, then a clean stop), test_dashboards.py (the metric families every process
declares), test_bagel_status.py and test_deployments.py (the default layout's audio,
which the other layouts must give). At start it serves one speech and one image request
through the CLI's paths, one BAGEL image that keeps its context (with what `starmesh
status` and the backbone's /metrics show before and after it: test_bagel_status.py),
and reads every process's /metrics, so what those tests read does not depend on their
order. Its tests run last in the session, together, and the ones that stop it (marked
`stops_local_up`) after the others (tests/conftest.py): one SIGINT, as Ctrl-C at the
terminal sends it (`up` stops the same way on SIGTERM: cli/up.py), whose exit code and
output every stopping test reads."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from client.speech import speak
from cluster import supervision_file
from engine.models.qwen3_omni.tiny import chat_prompt
from tests.e2e.default_up import READY, DefaultUp, start_default_up
from tests.fixtures import registry
from tests.fixtures.exposition_lint import scrape
from tests.fixtures.processes import children, printed_endpoints
from tests.fixtures.services import describe


# The speech request served at start (test_deployments.py sends the same one to the other layouts)
SPEECH_PROMPT, SPEECH_PARAMS = "Hello there", {"max_new_tokens": 12, "max_frames": 40}
PROMETHEUS_CONFIG = "prometheus.yml"  # in the run's directory: what `up --prometheus-config` wrote


@dataclass
class LocalUp:
    mesh: DefaultUp  # the `up` process, its output and its environment (what the README's examples use)
    directory: Path
    lines: list[str]  # what `up` printed up to "Ctrl-C stops everything"
    endpoints: dict[str, str]  # process -> gRPC address (the gateway: its http:// URL)
    metrics: dict[str, str]  # process -> its /metrics URL
    children: list[int]
    arenas: set[str] = field(default_factory=set)  # the services' shared-memory arenas
    speech: object = None  # client.speech's summary of the speech request (SPEECH_PROMPT, SPEECH_PARAMS)
    image: subprocess.CompletedProcess | None = None  # `starmesh imagine`
    families: dict[str, dict[str, str]] = field(default_factory=dict)  # process -> {family: type}, after both
    tls: object = None  # what reaches the services: the member certificates `up` made (runtime.tls)
    bagel: dict = field(default_factory=dict)  # _keep_a_bagel_context's record

    @property
    def deployment(self) -> Path:  # the file `up` runs
        return self.mesh.deployment

    @property
    def prometheus_config(self) -> Path:
        return self.directory / PROMETHEUS_CONFIG

    def stop(self) -> tuple[int, str]:
        """SIGINT once, then its exit code and everything `up` printed (the first call's)."""
        for address in self._services():
            registry.unregister(address)
        return self.mesh.stop(signal.SIGINT)

    def _services(self) -> list[str]:
        return [a for name, a in self.endpoints.items() if name not in ("conductor", "gateway")]


def start_local_up(directory: Path) -> LocalUp:
    """`up` started in `directory` (its deployment file, cache and scrape config), its
    services registered for the leak check, the requests of the module docstring served."""
    up = start_default_up(directory, options=("--verbose", "--prometheus-config", str(directory / PROMETHEUS_CONFIG)))
    try:
        lines = up.output.wait_for(READY, 10)
        mesh = LocalUp(up, directory, lines, printed_endpoints(lines), _printed_metrics(lines),
                       children(up.output.proc.pid))
        mesh.tls = supervision_file.member_tls_of(up.conductor, Path(up.env["STARMESH_CACHE"]))
        mesh.arenas = {describe(a, mesh.tls).arena for a in mesh._services()}
        for address in mesh._services():  # the leak check expects their arenas to outlive each test
            registry.register(address, describe(address, mesh.tls).arena, mesh.tls)
        _serve_requests(mesh)
        _keep_a_bagel_context(mesh)
        mesh.families = {name: declared_families(scrape(url)) for name, url in mesh.metrics.items()}
    except BaseException:
        for address in up.services.values():
            registry.unregister(address)
        up.stop(signal.SIGKILL)
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

    env = mesh.mesh.env
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
