"""Tiny built-in checkpoints in the cache: built once, rebuilt when an older starmesh
built them (their builder changed since)."""
from __future__ import annotations

from cluster import checkpoints


def test_a_stale_tiny_checkpoint_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("STARMESH_CACHE", str(tmp_path))
    logged = []
    path = checkpoints.tiny("llama", logged.append)
    assert (path / "config.json").exists() and checkpoints._current(path)
    assert checkpoints.tiny("llama", logged.append) == path and len(logged) == 2  # built once: 2 lines
    (path / checkpoints.VERSION_FILE).write_text("1")  # as an older starmesh left it
    (path / "left-by-the-old-build").write_text("")
    assert checkpoints.tiny("llama", logged.append) == path
    assert checkpoints._current(path) and not (path / "left-by-the-old-build").exists()
    assert len(logged) == 4 and not [p for p in tmp_path.joinpath("tiny").iterdir() if ".stale-" in p.name]
