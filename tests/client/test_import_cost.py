"""The SDK stays light: importing any client module loads neither torch nor numpy nor
a pipeline (a program that only speaks to a conductor pays for none of them), and
client/ never imports pipelines at all. Each check runs in a fresh interpreter, so
what another test imported does not hide an import."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(f"client.{p.stem}" for p in (REPO / "client").glob("*.py") if p.stem != "__init__")
MAX_MODULES = 400  # about twice what the SDK loads today (grpc, protobuf, the stubs); torch alone is ~1,000

PROBE = """
import json, sys
import {modules}
print(json.dumps({{"count": len(sys.modules), "heavy": sorted(m for m in sys.modules
      if m.split(".")[0] in ("torch", "numpy", "pipelines", "transformers"))}}))
"""


def _imported(modules: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE.format(modules=", ".join(modules))], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["client", "client.session", "client.speech", "client.events"])
def test_a_client_module_loads_no_torch_and_no_pipeline(module):
    got = _imported([module])
    assert got["heavy"] == [], f"import {module} loaded {got['heavy'][:10]}"
    assert got["count"] < MAX_MODULES, f"import {module} loaded {got['count']} modules"


def test_every_client_module_together_stays_light():
    got = _imported(["client", *MODULES])
    assert got["heavy"] == [], got["heavy"][:10]
    assert got["count"] < MAX_MODULES, got["count"]


def test_no_client_module_imports_pipelines():
    """Lazy imports included: the layering rule reads every import statement."""
    from tests.test_layering import imports_of

    arrows = [a for path in sorted((REPO / "client").rglob("*.py")) for a in imports_of(path)
              if a.target.split(".")[0] == "pipelines"]
    assert not arrows, [str(a) for a in arrows]
