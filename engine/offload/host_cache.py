"""The host weight cache: the final streamed tensors as an immutable, shared mmap entry.

Identity: key = sha256 of the tensors' names, dtypes, shapes and bytes (content_key),
so processes whose loaders produced the same tensors share one entry and any change of
bytes makes a new one. Layout under host_cache_root:
    <key>/manifest.json           {schema, key, tensors: {name: {file, dtype, shape}},
                                   files: {name: {bytes, sha256}}}
    <key>/weights-00000.safetensors ...   (shards of at most SHARD_BYTES)
    <key>.lock                    the writer's flock (cache_lock.writer_lock)
    .tmp-<key>-<pid>-<n>/         a publication in progress (renamed to <key>/ when complete)

publish_or_join: an existing entry is joined (no lock: entries never change); otherwise
the writer lock is taken (bounded wait), stale temporaries removed, the shards and
manifest written and fsynced into a temporary directory that is renamed atomically.
A joined entry is validated in full before use: manifest schema, key and tensor list,
each file's size and SHA-256, and the mapped tensors' content key. Any failure (corrupt
entry, timeout, I/O error) returns None and logs it: the ordinary tensors stay in use.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.offload.cache_lock import remove_stale_temps, temp_prefix, writer_lock
from engine.offload.host import HostWeightPlan, byte_view

log = logging.getLogger("engine.offload")
SCHEMA = 1
MANIFEST = "manifest.json"
SHARD_BYTES = 1 << 30
_counter = itertools.count()


class CacheError(ValueError):
    pass


def _metadata(tensors: dict[str, torch.Tensor]) -> list:
    return [[name, str(t.dtype), list(t.shape)] for name, t in sorted(tensors.items())]


def content_key(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the sorted names, dtypes, shapes, then each tensor's bytes."""
    h = hashlib.sha256(json.dumps(_metadata(tensors)).encode())
    for _, t in sorted(tensors.items()):
        h.update(byte_view(t.detach().contiguous()).numpy())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _shards(tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    shards, size = [{}], 0
    for name, t in sorted(tensors.items()):
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = t.detach().contiguous()
        size += nbytes
    return shards


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_entry(tmp: Path, key: str, tensors: dict[str, torch.Tensor]) -> None:
    tmp.mkdir()
    manifest = {"schema": SCHEMA, "key": key, "tensors": {}, "files": {}}
    for i, shard in enumerate(_shards(tensors)):
        name = f"weights-{i:05d}.safetensors"
        save_file(shard, str(tmp / name))
        _fsync(tmp / name)
        manifest["files"][name] = {"bytes": (tmp / name).stat().st_size, "sha256": file_sha256(tmp / name)}
        for tensor_name, t in shard.items():
            manifest["tensors"][tensor_name] = {"file": name, "dtype": str(t.dtype), "shape": list(t.shape)}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _fsync(tmp / MANIFEST)
    _fsync(tmp)


def _read_manifest(entry: Path, key: str, tensors: dict[str, torch.Tensor]) -> dict:
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CacheError(f"manifest unreadable: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or manifest.get("key") != key:
        raise CacheError("manifest schema or key does not match")
    listed = manifest.get("tensors")
    expected = {name: {"dtype": d, "shape": s} for name, d, s in _metadata(tensors)}
    if not isinstance(listed, dict) or {n: {"dtype": v.get("dtype"), "shape": v.get("shape")}
                                        for n, v in listed.items()} != expected:
        raise CacheError("manifest tensor list does not match the loaded tensors")
    return manifest


def _check_files(entry: Path, manifest: dict) -> None:
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise CacheError("manifest lists no files")
    for name, info in files.items():
        path = entry / name
        if not path.is_file() or path.stat().st_size != info.get("bytes"):
            raise CacheError(f"{name}: missing or wrong size")
        if file_sha256(path) != info.get("sha256"):
            raise CacheError(f"{name}: SHA-256 does not match the manifest")


def _map(entry: Path, manifest: dict) -> dict[str, torch.Tensor]:
    bindings = {}
    for file in sorted(manifest["files"]):
        with safe_open(str(entry / file), framework="pt", device="cpu") as handle:
            for name, info in manifest["tensors"].items():
                if info["file"] == file:
                    bindings[name] = handle.get_tensor(name)
    return bindings


def join(entry: Path, key: str, tensors: dict[str, torch.Tensor], note: str) -> HostWeightPlan:
    """The validated, mapped entry (CacheError when anything does not check out)."""
    manifest = _read_manifest(entry, key, tensors)
    _check_files(entry, manifest)
    bindings = _map(entry, manifest)
    if content_key(bindings) != key:
        raise CacheError("mapped tensors do not hash to the entry's key")
    files = tuple(str(entry / f) for f in sorted(manifest["files"]))
    return HostWeightPlan("host_weight_cache", bindings, files, note=note)


def _publish(root: Path, key: str, tensors: dict[str, torch.Tensor], timeout_s: float) -> str:
    """Writes the entry unless another process did while we waited; returns what happened."""
    entry = root / key
    with writer_lock(root / f"{key}.lock", timeout_s):
        if (entry / MANIFEST).is_file():
            return "joined"
        stale = remove_stale_temps(root, key)
        if stale:
            log.info("offload: host weight cache removed stale temporaries %s", stale)
        tmp = root / f"{temp_prefix(key)}{os.getpid()}-{next(_counter)}"
        _write_entry(tmp, key, tensors)
        os.rename(tmp, entry)
        _fsync(root)
    return "published"


def publish_or_join(root: str | Path, tensors: dict[str, torch.Tensor], timeout_s: float) -> HostWeightPlan | None:
    """The cache entry of `tensors` (published or joined), or None after logging why not."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        key = content_key(tensors)
        how = "joined" if (root / key / MANIFEST).is_file() else _publish(root, key, tensors, timeout_s)
        plan = join(root / key, key, tensors, note=how)
    except Exception as e:  # any cache failure keeps the ordinary tensors (the contract: fail closed)
        log.warning("offload: host weight cache unusable (%s: %s); falling back to ordinary tensors",
                    type(e).__name__, e)
        return None
    log.info("offload: host weight cache %s entry %s (%d tensors)", plan.note, key[:16], len(plan.bindings))
    return plan
