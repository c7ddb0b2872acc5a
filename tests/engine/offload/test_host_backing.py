"""Host backings across processes: checkpoint mmap pages are shared, the host weight cache
is published once and joined, a corrupt or locked cache falls back and says so."""
from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from engine.models.loader import load_model
from engine.offload.cache_lock import temp_prefix, writer_lock
from engine.offload.config import OffloadConfig
from engine.offload.host_cache import MANIFEST, content_key, publish_or_join
from engine.offload.probe import start_probes, stop_probes, two_process_pss
from engine.checkpoints.tiny_text import make_tiny

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("dlo-pss"), num_hidden_layers=4, hidden_size=128,
                         intermediate_size=512))


def tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"b.0.w": torch.randn(64, 33, generator=g), "b.0.n": torch.randn(33, generator=g).bfloat16(),
            "b.1.w": torch.randn(64, 33, generator=g)}


def test_two_processes_on_one_checkpoint_mapping_share_its_pages(qwen3):
    out = two_process_pss(qwen3, "mmap")
    assert out["host_kinds"] == ["checkpoint_mmap"] * 2
    assert min(out["mapping_rss_kib"]) >= 0.95 * out["host_bytes"] / 1024  # each process reads every block
    assert out["mapping_pss_kib"] <= 0.55 * sum(out["mapping_rss_kib"])  # together: about one copy


def test_two_processes_starting_together_publish_once_and_join(qwen3, tmp_path):
    go = str(tmp_path / "go")
    procs, reports = start_probes(qwen3, "cache", count=2, cache_root=str(tmp_path / "cache"), go=go)
    stop_probes(procs)
    assert sorted(r["host_note"] for r in reports) == ["joined", "published"]
    assert {r["host_kind"] for r in reports} == {"host_weight_cache"}
    assert reports[0]["files"] == reports[1]["files"]  # the same entry
    entries = [p for p in os.listdir(tmp_path / "cache") if not p.endswith(".lock")]
    assert len(entries) == 1 and not entries[0].startswith(".tmp")


def _corrupt_manifest(entry):
    (entry / MANIFEST).write_text("{not json")


def _corrupt_file(entry):
    shard = next(entry.glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))


@pytest.mark.parametrize("corrupt", [_corrupt_manifest, _corrupt_file], ids=["manifest", "file"])
def test_a_corrupt_entry_makes_the_next_start_fall_back_and_say_so(tmp_path, corrupt, caplog):
    plan = publish_or_join(tmp_path, tensors(), timeout_s=5)
    assert plan.note == "published" and all(torch.equal(plan.bindings[k], v) for k, v in tensors().items())
    assert publish_or_join(tmp_path, tensors(), timeout_s=5).note == "joined"
    corrupt(tmp_path / content_key(tensors()))
    with caplog.at_level(logging.WARNING, logger="engine.offload"):
        assert publish_or_join(tmp_path, tensors(), timeout_s=5) is None
    assert "falling back to ordinary tensors" in caplog.text


def test_the_loader_keeps_ordinary_tensors_when_the_cache_is_corrupt(qwen3, tmp_path, caplog):
    config = OffloadConfig(enabled=True, host_backing="cache", host_cache_root=str(tmp_path))
    first = load_model(qwen3, offload=config).offload_backend
    assert (first.host_kind, first.host_note) == ("host_weight_cache", "published")
    entry = next(p for p in tmp_path.iterdir() if p.is_dir())
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["files"][next(iter(manifest["files"]))]["sha256"] = "0" * 64
    (entry / MANIFEST).write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="engine.offload"):
        assert load_model(qwen3, offload=config).offload_backend.host_kind == "tensors"
    assert "SHA-256 does not match" in caplog.text


def test_the_lock_owner_removes_stale_temporaries(tmp_path):
    key = content_key(tensors())
    stale = tmp_path / f"{temp_prefix(key)}99999-0"
    stale.mkdir()
    (stale / "weights-00000.safetensors").write_bytes(b"half written")
    assert publish_or_join(tmp_path, tensors(), timeout_s=5).note == "published"
    assert not stale.exists()


def test_a_held_lock_is_waited_for_then_abandoned(tmp_path, caplog):
    key = content_key(tensors(1))
    with writer_lock(tmp_path / f"{key}.lock", timeout_s=1):  # another writer (flock is per open file)
        with caplog.at_level(logging.WARNING, logger="engine.offload"):
            assert publish_or_join(tmp_path, tensors(1), timeout_s=0.2) is None
    assert "LockTimeout" in caplog.text and "falling back" in caplog.text


def test_a_dtype_mismatch_fails_the_mmap_preflight(qwen3, caplog):
    with caplog.at_level(logging.INFO, logger="engine.offload"):
        model = load_model(qwen3, dtype="bfloat16", offload=OffloadConfig(enabled=True, host_backing="mmap"))
    assert model.offload_backend.host_kind == "tensors"
    assert "preflight failed" in caplog.text and "F32" in caplog.text
