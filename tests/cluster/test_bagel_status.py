"""BAGEL's kept contexts as an operator sees them, on the default deployment as users run
it (the session's `local_up`, which sent one BAGEL image with keep_context when it
started: tests/cluster/local_up.py): `starmesh status` shows the backbone's KV pool use
and its kept contexts with their blocks as it does the thinker's, and the backbone's
/metrics exports them under the thinker's families."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.timeout(400)  # the session's local_up may start here


def _line(text: str, service: str) -> str:
    return next(line for line in text.splitlines() if line.split()[0] == service)


def test_a_kept_bagel_context_shows_in_status_and_metrics(local_up):
    record = local_up.bagel
    assert record["image"].returncode == 0, record["image"].stderr
    assert record["rows"].returncode == 0 and record["lines"].returncode == 0, record["lines"].stdout
    load = next(row for row in json.loads(record["rows"].stdout) if row["service"] == "bagel")["load"]
    used, total, free = (int(load[k]) for k in ("kv_blocks_used", "kv_blocks_total", "kv_blocks_free"))
    kept, blocks = int(load["contexts"]), int(load["context_blocks"])
    assert kept == 1 and blocks > 0  # the request's contexts, kept past it
    assert 0 < used <= blocks and used + free == total  # no request holds a block: only the kept context does
    assert f"kv {used}/{total} contexts 1 ({blocks} blocks)" in _line(record["lines"].stdout, "bagel")
    thinker = _line(record["lines"].stdout, "thinker")  # the thinker's kept contexts read the same way
    assert " kv " in thinker and " contexts " in thinker and " blocks)" in thinker

    before, after = record["before"], record["after"]
    assert before["starmesh_contexts_kept"] == 0 and after["starmesh_contexts_kept"] == 1
    assert (before["starmesh_contexts_kept_total"], after["starmesh_contexts_kept_total"]) == (0, 1)  # contexts, not entries
    assert after["starmesh_contexts_dropped_total"] == 0
    assert after["starmesh_context_blocks"] == blocks
    assert (after["starmesh_kv_blocks_used"], after["starmesh_kv_blocks_capacity"]) == (used, total)
    assert after["starmesh_kv_blocks_free"] == free
    assert after["starmesh_requests_running"] == 0
    assert after["starmesh_rows_written"] > before["starmesh_rows_written"]
