"""Checkpoints of a deployment: a path as given, or a tiny built-in one built on first
use into the cache ($STARMESH_CACHE, default ~/.cache/starmesh) and reused after.

Building writes into a temporary directory renamed into place only when complete, under
an flock, so two `starmesh up` started together build once and never see half a
checkpoint.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import sys
import time
from pathlib import Path

from core.cache_root import cache_root
from core.errors import GraphError

__all__ = ["resolve", "tiny"]

# A checkpoint directory holds one of these: a transformers model, a diffusers pipeline,
# or BAGEL's release layout.
CHECKPOINT_MARKERS = ("config.json", "model_index.json", "llm_config.json")


def resolve(spec: dict, log=lambda msg: print(msg, file=sys.stderr, flush=True), build: bool = True) -> Path | None:
    """The checkpoint directory for one `checkpoints:` entry (building a tiny one if
    needed). build=False: None for a tiny one not built yet, after the checks that need
    no build (a bad path or an unknown kind is still a GraphError)."""
    if "path" in spec:
        path = Path(spec["path"]).expanduser()
        if not any((path / marker).is_file() for marker in CHECKPOINT_MARKERS):
            raise GraphError(f"checkpoint {path} has no {' / '.join(CHECKPOINT_MARKERS)}")
        return path
    return tiny(spec["tiny"], log, build)


# Bumped when a builder changes what it writes, so a cache built by an older starmesh is
# rebuilt (2: the Qwen3-Omni talker's experts are initialised, not left as torch.empty;
# 3: the tokenizers carry a chat template; 4: Qwen3-Omni ships its processor configuration
# and the audio/vision end tokens; 5: its chat template renders audio and image parts;
# 6: its video processor configuration and video parts; 7: the world model's encoder norms
# are random and its config names its loop).
TINY_VERSION = "7"
VERSION_FILE = ".starmesh-tiny-version"


def _current(final: Path) -> bool:
    try:
        return (final / VERSION_FILE).read_text().strip() == TINY_VERSION
    except OSError:
        return False


def tiny(kind: str, log, build: bool = True) -> Path | None:
    from cluster.registry import tiny_kinds

    if kind not in tiny_kinds():
        raise GraphError(f"tiny checkpoint kind {kind!r} is unknown (have {tiny_kinds()})")
    root = cache_root() / "tiny"
    root.mkdir(parents=True, exist_ok=True)
    final = root / kind
    if _current(final):
        return final
    if not build:
        return None
    with open(root / f".{kind}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _current(final):  # built by another process while we waited
            return final
        return _build(kind, final, log)


def _build(kind: str, final: Path, log) -> Path:
    from cluster.registry import build_tiny

    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"building the tiny {kind} checkpoint in {final} (first use only) ...")
    t0 = time.perf_counter()
    try:
        build_tiny(kind, tmp)
        (tmp / VERSION_FILE).write_text(TINY_VERSION)
        if final.exists():  # an older build: out of the way first (os.replace needs an empty target)
            stale = final.with_name(f".{final.name}.stale-{os.getpid()}")
            os.replace(final, stale)
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"built the tiny {kind} checkpoint in {time.perf_counter() - t0:.1f} s")
    return final
