"""Checkpoint mmap: the streamed parameters as views of the checkpoint's safetensors files.

The preflight proves, before ordinary loading is skipped for them, that every streamed
parameter has exactly one checkpoint source, read whole (no index into the parameter,
no concatenation of per-expert tensors), with the same shape and dtype. safetensors'
`get_tensor` returns a view of a private read-only file mapping (its pages are the page
cache's, shared by every process mapping the file); the view keeps the mapping alive
after the file handle is closed. Any failure returns None with a log line saying why,
and the loader materializes the weights ordinarily.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

import torch
from safetensors import SafetensorError, safe_open

from engine.offload.host import HostWeightPlan

log = logging.getLogger("engine.offload")

SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                      "U8": torch.uint8, "BOOL": torch.bool}


class PreflightError(ValueError):
    pass


def _sources_by_param(sources: Iterable[tuple[str, str, object]], names: frozenset[str]) -> dict[str, list]:
    by_param: dict[str, list] = {name: [] for name in names}
    for param, ckpt, index in sources:
        if param in by_param:
            by_param[param].append((ckpt, index))
    return by_param


def preflight(expected: dict[str, tuple[tuple[int, ...], torch.dtype]], files: dict[str, Path],
              sources: Iterable[tuple[str, str, object]]) -> dict[str, str]:
    """streamed parameter -> its one checkpoint tensor name, or PreflightError naming the first mismatch.
    expected: parameter -> (shape, dtype) of the runtime layout."""
    by_param = _sources_by_param(sources, frozenset(expected))
    chosen, used = {}, set()
    handles: dict[Path, object] = {}
    for name, found in sorted(by_param.items()):
        if len(found) != 1 or found[0][1] is not None:
            raise PreflightError(f"{name!r} has {len(found)} checkpoint sources"
                                 f"{' (an indexed part)' if found and found[0][1] is not None else ''}, "
                                 "not exactly one whole tensor")
        ckpt = found[0][0]
        if ckpt not in files or ckpt in used:
            raise PreflightError(f"{name!r}: checkpoint tensor {ckpt!r} is missing or already used")
        file = files[ckpt]
        handle = handles.get(file) or handles.setdefault(file, safe_open(str(file), framework="pt", device="cpu"))
        meta = handle.get_slice(ckpt)
        shape, dtype = tuple(meta.get_shape()), SAFETENSORS_DTYPES.get(meta.get_dtype())
        if (shape, dtype) != expected[name]:
            raise PreflightError(f"{name!r}: checkpoint {ckpt!r} is {shape} {meta.get_dtype()}, the runtime "
                                 f"layout {expected[name][0]} {expected[name][1]}")
        chosen[name] = ckpt
        used.add(ckpt)
    return chosen


def checkpoint_mmap_plan(expected: dict[str, tuple[tuple[int, ...], torch.dtype]], files: dict[str, Path],
                         sources: Iterable[tuple[str, str, object]]) -> HostWeightPlan | None:
    """The checkpoint plan of the streamed parameters, or None (ordinary loading) after
    logging why the preflight failed."""
    try:
        chosen = preflight(expected, files, sources)
    except (PreflightError, SafetensorError, OSError) as e:
        log.info("offload: checkpoint mmap preflight failed (%s); loading the streamed weights ordinarily", e)
        return None
    bindings, mapped = {}, sorted({str(files[c]) for c in chosen.values()})
    for path in mapped:
        with safe_open(path, framework="pt", device="cpu") as handle:
            for name, ckpt in chosen.items():
                if str(files[ckpt]) == path:
                    bindings[name] = handle.get_tensor(ckpt)
    log.info("offload: checkpoint mmap preflight passed: %d streamed tensors mapped from %d file(s)",
             len(bindings), len(mapped))
    return HostWeightPlan("checkpoint_mmap", bindings, tuple(mapped), note="preflight")
