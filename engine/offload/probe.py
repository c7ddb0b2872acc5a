"""A weights probe process: loads a thinker checkpoint with offload, runs one forward, and
reports; the tests and bench.offload start two of them to measure page sharing.

    python -m engine.offload.probe CKPT --backing mmap [--cache-root DIR] [--go FILE]

Prints one JSON line {pid, host_kind, host_note, files, anon_before_kib, host_bytes} once the
weights are loaded and touched, then waits until stdin closes (so a parent can read
/proc/<pid>/smaps while both probes hold their mappings). --go: wait for FILE to exist
before loading (start several probes together).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from engine.offload.backend import release_memory
from engine.offload.memory import mapping_kib, process_pss_kib


def _probe(args: argparse.Namespace) -> tuple[dict, object]:
    """(report, the engine: the caller keeps it alive while the parent measures)."""
    import torch

    torch.set_num_threads(1)
    import engine.checkpoint  # noqa: F401  (imported before the PSS baseline)
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.offload.config import OffloadConfig
    from engine.offload.loading import set_process_config
    from engine.sampling import SamplingParams

    while args.go and not os.path.exists(args.go):
        time.sleep(0.005)
    release_memory()  # freed import-time pages must not be reused by the weights unseen
    anon_before = process_pss_kib(os.getpid(), "Pss_Anon")
    set_process_config(None if args.backing == "none" else OffloadConfig(
        enabled=True, host_backing=args.backing, host_cache_root=args.cache_root if args.backing == "cache" else ""))
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=args.checkpoint, num_blocks=16))
    engine.generate([[1, 2, 3, 4]], SamplingParams(max_new_tokens=1))  # every block's pages are read
    backend = engine.model.offload_backend
    files = list(backend.transfer.source.host_plan.files) if backend and backend.host_kind != "tensors" else []
    report = {"pid": os.getpid(), "host_kind": backend.host_kind if backend else "resident",
              "host_note": backend.host_note if backend else "", "files": files, "anon_before_kib": anon_before,
              "host_bytes": sum(t.numel() * t.element_size() for t in backend.host_tensors()) if backend else 0}
    return report, engine


def start_probes(checkpoint: str, backing: str, count: int = 2, cache_root: str = "",
                 go: str = "") -> tuple[list[subprocess.Popen], list[dict]]:
    """Starts `count` probes and returns them with their reports (they wait for stdin)."""
    cmd = [sys.executable, "-m", "engine.offload.probe", checkpoint, "--backing", backing]
    cmd += ["--cache-root", cache_root] if cache_root else []
    cmd += ["--go", go] if go else []
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    if go:
        open(go, "w").close()
    reports = []
    for proc in procs:
        line = proc.stdout.readline()
        if not line:
            stop_probes(procs)
            raise RuntimeError(f"probe {proc.pid} exited with {proc.wait()} before reporting")
        reports.append(json.loads(line))
    return procs, reports


def stop_probes(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.stdin.close()
    for proc in procs:
        proc.wait(timeout=60)


def two_process_pss(checkpoint: str, backing: str) -> dict:
    """Weights PSS of two probes together (kB): their anonymous PSS growth from loading
    plus the PSS of the weight file mappings (their PSS and RSS also reported alone)."""
    procs, reports = start_probes(checkpoint, backing)
    try:
        anon = sum(process_pss_kib(r["pid"], "Pss_Anon") - r["anon_before_kib"] for r in reports)
        out = {"mapping_pss_kib": sum(mapping_kib(r["pid"], r["files"]) for r in reports)}
        out["weights_pss_kib"] = anon + out["mapping_pss_kib"]
        out["mapping_rss_kib"] = [mapping_kib(r["pid"], r["files"], "Rss") for r in reports]
        out["host_kinds"] = [r["host_kind"] for r in reports]
        out["host_bytes"] = reports[0]["host_bytes"]
        return out
    finally:
        stop_probes(procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--backing", choices=("none", "tensors", "mmap", "cache"), default="mmap")
    parser.add_argument("--cache-root", default="")
    parser.add_argument("--go", default="")
    report, engine = _probe(parser.parse_args())
    print(json.dumps(report), flush=True)
    sys.stdin.read()
    del engine


if __name__ == "__main__":
    main()
