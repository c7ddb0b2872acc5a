"""docs/sessions.md's Python example runs as written against the session mesh (its address
and model name swapped for the mesh's), with the SDK's conversation object."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.doc_examples import REPO, fenced_blocks
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(120)


def test_the_docs_example_holds_a_two_turn_conversation(session_mesh):
    blocks = [lines for lang, _, lines in fenced_blocks((REPO / "docs/sessions.md").read_text()) if lang == "python"]
    assert len(blocks) == 1
    code = "\n".join(blocks[0]).replace("127.0.0.1:50050", session_mesh.address).replace('"qwen3-omni"', '"omni"')
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr[-2000:]
    status, samples, cached = out.stdout.split()
    assert status == "completed" and int(samples) > 0 and int(cached) > 0  # the second turn read the kept context
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()
