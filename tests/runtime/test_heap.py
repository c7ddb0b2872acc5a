"""settle_heap: what a service process does to its heap once it serves (in a child
process: freezing is for a process's own startup, never for the test runner's)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)


def test_settle_heap_freezes_startup_objects_and_still_collects_new_cycles():
    script = textwrap.dedent("""
        import gc, weakref
        from runtime.heap import YOUNG_THRESHOLD, settle_heap

        class Node:
            pass

        before = gc.get_freeze_count()
        settle_heap()
        assert gc.get_freeze_count() > before, "nothing frozen"
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made while serving
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None, "a cycle made after settle_heap was not collected"
        try:
            settle_heap(0)
        except ValueError as e:
            assert "young_threshold" in str(e)
        else:
            raise AssertionError("settle_heap(0) was accepted")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
