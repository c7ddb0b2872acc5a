"""Layerwise offload (DLO) benchmark: resident vs streamed blocks, and page sharing.

    python -m bench.offload --json bench-results/offload.json

Until the DiT of [E] takes the offload configuration, the block stack measured is the
thinker's: a random Qwen3 checkpoint (hidden 512, 8 layers, fp32, ~140 MB of layers)
built on first use. One forward = a prefill of --tokens tokens (compute-bound, as a DiT
step is) through the paged model; the decode figure (one token, weight-bandwidth-bound)
is reported beside it. On CPU the "device" is working memory and the copy stream a copy
thread, so DLO adds a memcpy of every block per forward that overlaps the previous
block's compute. Best of --repeats forwards after a warm-up, resident and DLO forwards
alternating (the machine is shared and noisy), one torch thread.

Also the real-size code2wav (random weights, its declared stacks) for --code2wav-frames.

PSS: two probe processes (engine.offload.probe) load the checkpoint with private
ordinary tensors, then with the checkpoint mmap backing (and, as the baseline, without
offload); each figure is the two processes' combined growth of anonymous PSS from
loading and one forward, plus the PSS of the weight file mappings (MiB). The growth
includes what loading and a forward allocate besides the weights, and on CPU the two
slots (the "device" memory) of each process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from bench.output import print_table, write_json

CONFIG = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
              num_key_value_heads=4, head_dim=64, vocab_size=2048, max_position_embeddings=4096)


def checkpoint(root: str) -> str:
    from engine.tiny import make_tiny

    path = os.path.join(root, "qwen3-offload-bench")
    if not os.path.exists(os.path.join(path, "config.json")):
        make_tiny("qwen3", path, **CONFIG)
    return path


def _step(num_tokens: int, past: int = 0):
    """Inputs of one sequence's step: num_tokens query tokens after `past` cached ones."""
    import torch

    from engine.attention.metadata import AttentionMetadata

    total = past + num_tokens
    meta = AttentionMetadata(query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32),
                             seq_lens=torch.tensor([total], dtype=torch.int32),
                             block_tables=torch.arange(-(-total // 16), dtype=torch.int32)[None],
                             slot_mapping=torch.arange(past, total), block_size=16)
    ids = torch.randint(0, CONFIG["vocab_size"], (num_tokens,), generator=torch.Generator().manual_seed(0))
    return ids, torch.arange(past, total), meta


class Forward:
    """One model's forward over its own KV caches, timed."""

    def __init__(self, model, num_tokens: int, past: int = 0) -> None:
        import torch

        shape = (-(-(past + num_tokens) // 16), 16, model.config.num_kv_heads, model.config.head_dim)
        self.caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(model.config.num_layers)]
        self.model, self.inputs, self.times = model, _step(num_tokens, past), []

    def __call__(self) -> None:
        ids, positions, meta = self.inputs
        t0 = time.perf_counter()
        self.model(ids, positions, meta, self.caches)
        self.times.append((time.perf_counter() - t0) * 1e3)


def best_of_interleaved(a: Forward, b: Forward, repeats: int) -> tuple[float, float]:
    """Best ms of each, their forwards alternating (so load changes hit both alike)."""
    a(), b()  # warm-up
    a.times, b.times = [], []
    for _ in range(repeats):
        a(), b()
    return min(a.times), min(b.times)


def measure_speed(path: str, tokens: int, repeats: int) -> dict:
    from engine.checkpoint import load_model
    from engine.offload.config import OffloadConfig
    from engine.offload.memory import param_bytes, weight_bytes

    resident = load_model(path)
    model = load_model(path, offload=OffloadConfig(enabled=True))
    backend = model.offload_backend
    out = {"resident_weight_bytes": weight_bytes(resident), "dlo_weight_bytes": weight_bytes(model, backend),
           "dlo_weight_bound_bytes": 2 * backend.plan.slot_bytes + param_bytes(resident, backend.plan.streamed_names),
           "block_bytes": backend.plan.slot_bytes, "num_blocks": len(backend.plan.blocks)}
    prefill = Forward(model, tokens)
    prefill()
    backend.reset_stats()  # count the timed forwards only
    out["resident_ms"], out["dlo_ms"] = best_of_interleaved(Forward(resident, tokens), prefill, repeats)
    stats = backend.stats
    out["copy_ms_per_block"] = stats.copy_s / max(stats.fills_waited, 1) * 1e3
    out["compute_ms_per_block"] = stats.compute_s / max(stats.blocks_run, 1) * 1e3
    out["wait_ms_per_block"] = stats.wait_s / max(stats.blocks_run, 1) * 1e3
    out["decode_resident_ms"], out["decode_dlo_ms"] = best_of_interleaved(
        Forward(resident, 1, past=tokens), Forward(model, 1, past=tokens), repeats * 4)
    out["dlo_over_resident"] = out["dlo_ms"] / out["resident_ms"]
    out["decode_dlo_over_resident"] = out["decode_dlo_ms"] / out["decode_resident_ms"]
    backend.disable()
    return out


def measure_code2wav(num_frames: int, repeats: int) -> dict:
    """The real-size code2wav (transformers' default widths, random weights): its
    declared stacks (8 transformer layers, 4 decoder blocks) streamed vs resident."""
    import copy

    import torch

    from engine.models.code2wav import Code2Wav, Code2WavConfig
    from engine.offload import OffloadBackend, OffloadConfig

    torch.manual_seed(0)
    resident = Code2Wav(Code2WavConfig()).requires_grad_(False).eval()
    model = copy.deepcopy(resident)
    backend = OffloadBackend.enable(model, OffloadConfig(enabled=True))
    codes = torch.randint(0, 2048, (1, 16, num_frames), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {"resident": [], "dlo": []}
    for i in range(repeats + 1):
        for name, m in (("resident", resident), ("dlo", model)):
            t0 = time.perf_counter()
            m(codes)
            times[name].append((time.perf_counter() - t0) * 1e3)
    backend.disable()
    best = {k: min(v[1:]) for k, v in times.items()}
    return {"code2wav_frames": num_frames, "code2wav_resident_ms": best["resident"], "code2wav_dlo_ms": best["dlo"],
            "code2wav_dlo_over_resident": best["dlo"] / best["resident"],
            "code2wav_block_bytes": backend.plan.slot_bytes}


def measure_pss(path: str) -> dict:
    from engine.offload.probe import two_process_pss

    private, mapped = two_process_pss(path, "tensors"), two_process_pss(path, "mmap")
    resident = two_process_pss(path, "none")
    return {"pss_mib_two_processes_resident": resident["weights_pss_kib"] / 1024,
            "pss_mib_two_processes_private": private["weights_pss_kib"] / 1024,
            "pss_mib_two_processes_mmap": mapped["weights_pss_kib"] / 1024,
            "mapping_pss_mib_two_processes_mmap": mapped["mapping_pss_kib"] / 1024,
            "mapping_rss_mib_per_process_mmap": mapped["mapping_rss_kib"][0] / 1024}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.offload", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--tokens", type=int, default=128, help="prefill tokens per forward")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--code2wav-frames", type=int, default=16, help="code2wav window (0: skip code2wav)")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "starmesh-bench"))
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    path = checkpoint(args.cache)
    results = {"model": "qwen3 thinker stack (hidden 512, 8 layers, fp32)", "torch_threads": 1,
               "prefill_tokens": args.tokens}
    print("timing resident and DLO forwards", flush=True)
    results.update(measure_speed(path, args.tokens, args.repeats))
    if args.code2wav_frames:
        print("timing code2wav (real widths)", flush=True)
        results.update(measure_code2wav(args.code2wav_frames, max(2, args.repeats // 2)))
    print("measuring PSS of two processes", flush=True)
    results.update(measure_pss(path))
    print_table([
        ("resident forward", "resident_ms", "ms"),
        ("DLO forward", "dlo_ms", "ms"),
        ("DLO / resident", "dlo_over_resident", "x (target <= 1.3)"),
        ("decode DLO / resident", "decode_dlo_over_resident", "x (bandwidth-bound)"),
        ("code2wav DLO / resident", "code2wav_dlo_over_resident", "x"),
        ("copy per block", "copy_ms_per_block", "ms"),
        ("compute per block", "compute_ms_per_block", "ms"),
        ("resident weights", "resident_weight_bytes", "bytes"),
        ("DLO weights (non-host)", "dlo_weight_bytes", "bytes"),
        ("bound: 2 blocks + resident", "dlo_weight_bound_bytes", "bytes"),
        ("PSS 2 procs no offload", "pss_mib_two_processes_resident", "MiB"),
        ("PSS 2 procs private", "pss_mib_two_processes_private", "MiB"),
        ("PSS 2 procs mmap", "pss_mib_two_processes_mmap", "MiB"),
    ], results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
