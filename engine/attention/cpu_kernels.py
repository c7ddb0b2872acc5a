"""Compiled CPU kernels (engine/attention/csrc/*.cpp), built on first use with torch's
C++ extension loader and cached per machine.

Why compiled: on CPU, a decode step's attention in plain torch must first gather each
sequence's blocks into one buffer and then let SDPA read that buffer again; the kernel
reads the blocks where they lie (csrc/paged_decode.cpp), 2-3x faster. RMSNorm in one
pass per row instead of six dispatches (csrc/rms_norm.cpp): four norms a layer.

The build (one C++ file, ~20 s, once per machine and torch version) lands in
$STARMESH_CACHE/kernels (default ~/.cache/starmesh/kernels), keyed by the sources, the
flags, torch's version and the CPU (the code is built for the CPU it runs on).
`scripts/setup.sh` builds it ahead; `python -m engine.attention.cpu_kernels` does too.
Without a C++ compiler, or with STARMESH_CPU_KERNELS=0, the torch paths run instead
(one warning says why).
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import time
from pathlib import Path

from core.cache_root import cache_root

log = logging.getLogger(__name__)

SOURCES = [Path(__file__).parent / "csrc" / name for name in ("paged_decode.cpp", "rms_norm.cpp")]
# -ffast-math: glibc's vector expf (libmvec) for the softmax, and reassociated sums in the
# dot products (fp32 accumulation either way; the kernel never meets inf or NaN: scores are
# max-subtracted and only tokens the model wrote are read). ~1.5x over strict IEEE here.
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd"]


def _cpu_identity() -> str:
    """The CPU's model and flags: code built with -march=native only runs where they match."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        import platform

        return platform.processor() or platform.machine()
    return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))


def build_key() -> str:
    import torch

    digest = hashlib.sha256()
    for part in [*(p.read_bytes() for p in SOURCES), " ".join(FLAGS).encode(), torch.__version__.encode(),
                 _cpu_identity().encode()]:
        digest.update(part)
    return digest.hexdigest()[:16]


def build_dir(key: str) -> Path:
    return cache_root() / "kernels" / key


def enabled() -> bool:
    return os.environ.get("STARMESH_CPU_KERNELS", "1").lower() not in ("0", "false", "no", "off")


@functools.cache
def _ops():
    """torch.ops.starmesh, or None (disabled, or the build failed: callers use their torch paths)."""
    if not enabled():
        return None
    try:
        _load()
    except Exception as e:  # no compiler, no ninja, a read-only cache...: torch paths still work
        log.warning("CPU kernels unavailable, attention and norms run in plain torch (slower): %s",
                    str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)
        return None
    import torch

    return torch.ops.starmesh


def paged_decode():
    """paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale) -> [S, H, D], or None."""
    ops = _ops()
    return None if ops is None else ops.paged_decode


def rms_norm():
    """rms_norm(x, weight, eps) -> like x (transformers' RMSNorm), or None."""
    ops = _ops()
    return None if ops is None else ops.rms_norm


def _load() -> None:
    from torch.utils.cpp_extension import load

    key = build_key()
    directory = build_dir(key)
    directory.mkdir(parents=True, exist_ok=True)
    built = directory / f"starmesh_kernels_{key}.so"
    if built.exists():  # the key covers sources, flags, torch and CPU: up to date by construction
        import torch

        torch.ops.load_library(str(built))
        return
    log.warning("building starmesh CPU kernels into %s (once per machine, ~20 s)", directory)
    t0 = time.perf_counter()
    # torch's loader holds a lock in `directory`: processes starting together build once
    load(name=built.stem, sources=[str(p) for p in SOURCES], extra_cflags=FLAGS, build_directory=str(directory),
         is_python_module=False, verbose=False)
    log.warning("starmesh CPU kernels built in %.1f s", time.perf_counter() - t0)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    op = paged_decode()
    print(f"starmesh CPU kernels: {'ready in ' + str(build_dir(build_key())) if op else 'unavailable'}")
    return 0 if op is not None or not enabled() else 1


if __name__ == "__main__":
    raise SystemExit(main())
