"""A weights probe process: loads a checkpoint with offload, runs one forward, and reports;
the tests and bench.offload start two of them to measure page sharing. By default the
checkpoint is a thinker's, run through an LLMEngine (a one-token generate); `--loader
module:callable` names a model's own probe loader instead, e.g. a diffusion model's DiT
(engine/models/<model>/offload_probe.py). A loader takes the checkpoint directory and
returns (what to keep alive, the offload backend or None, the weight files it mapped)
after one forward that read every block; its module is imported before the memory
baseline, so what it imports at module level is not counted as weights.

    python -m engine.offload.probe CKPT --backing mmap [--loader M:F] [--cache-root DIR] [--go FILE]

Prints one JSON line {pid, host_kind, host_note, files, anon_before_kib, host_bytes} once the
weights are loaded and touched, then waits until stdin closes (so a parent can read
/proc/<pid>/smaps while both probes hold their mappings). --go: wait for FILE to exist
before loading (start several probes together).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Callable

from engine.offload.backend import release_memory
from engine.offload.memory import mapping_kib, process_pss_kib


def _load_thinker(checkpoint: str):
    """(the engine, its offload backend or None, []) after a one-token generate."""
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.sampling_params import SamplingParams

    if os.path.isfile(os.path.join(checkpoint, "model_index.json")):
        raise ValueError(f"{checkpoint} is a diffusers pipeline, not a thinker checkpoint: pass its model's "
                         "probe loader (--loader module:callable)")
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, num_blocks=16))
    engine.generate([[1, 2, 3, 4]], SamplingParams(max_new_tokens=1))  # every block's pages are read
    return engine, engine.model.offload_backend, []


def _loader(path: str) -> Callable[[str], tuple]:
    """The probe loader `path` ("module:callable") names, its module imported now; the
    thinker's one-token generate when empty."""
    if not path:
        import engine.models.loader  # noqa: F401  (imported before the PSS baseline)
        import engine.llm_engine  # noqa: F401
        import engine.sampling_params  # noqa: F401

        return _load_thinker
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--loader {path!r} is not 'module:callable'")
    return getattr(importlib.import_module(module_name), attr)


def _probe(args: argparse.Namespace) -> tuple[dict, object]:
    """(report, the loaded model's holder: the caller keeps it alive while the parent measures)."""
    import torch

    torch.set_num_threads(1)
    load = _loader(args.loader)
    from engine.offload.config import OffloadConfig
    from engine.offload.loading import set_process_config

    while args.go and not os.path.exists(args.go):
        time.sleep(0.005)
    release_memory()  # freed import-time pages must not be reused by the weights unseen
    anon_before = process_pss_kib(os.getpid(), "Pss_Anon")
    set_process_config(None if args.backing == "none" else OffloadConfig(
        enabled=True, host_backing=args.backing, host_cache_root=args.cache_root if args.backing == "cache" else ""))
    holder, backend, weight_files = load(args.checkpoint)
    files = list(backend.transfer.source.host_plan.files) if backend and backend.host_kind != "tensors" else []
    files += [f for f in weight_files if f not in files]
    report = {"pid": os.getpid(), "host_kind": backend.host_kind if backend else "resident",
              "host_note": backend.host_note if backend else "", "files": files, "anon_before_kib": anon_before,
              "host_bytes": sum(t.numel() * t.element_size() for t in backend.host_tensors()) if backend else 0}
    return report, holder


def start_probes(checkpoint: str, backing: str, count: int = 2, cache_root: str = "", go: str = "",
                 loader: str = "") -> tuple[list[subprocess.Popen], list[dict]]:
    """Starts `count` probes and returns them with their reports (they wait for stdin).
    loader: a model's probe loader, "module:callable" (default: a thinker checkpoint's)."""
    cmd = [sys.executable, "-m", "engine.offload.probe", checkpoint, "--backing", backing]
    cmd += ["--loader", loader] if loader else []
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


def two_process_pss(checkpoint: str, backing: str, loader: str = "") -> dict:
    """Weights PSS of two probes together (kB): their anonymous PSS growth from loading
    plus the PSS of the weight file mappings (their PSS and RSS also reported alone).
    loader: as start_probes'."""
    procs, reports = start_probes(checkpoint, backing, loader=loader)
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
    parser.add_argument("--loader", default="", help="a model's probe loader, module:callable (default: thinker)")
    parser.add_argument("--cache-root", default="")
    parser.add_argument("--go", default="")
    report, holder = _probe(parser.parse_args())
    print(json.dumps(report), flush=True)
    sys.stdin.read()
    del holder


if __name__ == "__main__":
    main()
