"""Layerwise offload (DLO) benchmark on the DiT: resident vs streamed blocks, and page sharing.

    python -m bench.offload --json bench-results/offload.json [--quick]

The model is the dit service's (diffusers' SD3Transformer2DModel, loaded by
engine.models.sd3.dit.Sd3Dit.load, with offload through OffloadConfig) at bench.image's
resolution: 256x256 images (32x32 latents, 256 image tokens) with 77 + 77 text tokens.
The checkpoint is bench.image's (engine.models.sd3.tiny's "bench" preset) with a larger random
DiT: bench.image's has 2 blocks of 3.4 MB, where two slots would hold every block and a
block copy (~0.2 ms) is noise. Here the DiT is 6 heads x 64 (width 384, SD3's head
size) and 12 blocks (~21 MB each, ~250 MB in all, fp32), the other geometry (latent
channels, text widths, patch size, position embedding) the bench preset's. Built once
under --cache.

One forward = one denoising step's transformer call as the service runs it: the CFG
batch of 2 (cond and uncond branches of one request) through Sd3Dit.denoise.
Resident and DLO (rank-local, host backing "tensors") components alternate, their order
swapped every round (the machine is shared and noisy); medians of --rounds rounds after
a warm-up, one torch thread. On CPU the "device" is working memory and the copy stream a
copy thread: DLO adds a memcpy of every block per forward that overlaps the previous
block's compute.

Keys: resident_ms, dlo_ms (medians; *_best: best of each; *_rounds: every round),
dlo_over_resident (the median over rounds of DLO / resident within a round: robust to
load drifting between rounds; *_of_medians, *_best: the ratios of those figures);
copy_ms_per_block (the copy thread's time per fill during the timed DLO forwards, as the
streamer counts it; copy_ms_per_block_idle: one block copied alone); compute_ms_per_block
(the resident blocks timed by hooks; dlo_compute_ms_per_block: the streamed ones, while
the copies run); wait_ms_per_block (the compute thread blocked on a fill);
resident_weight_bytes, dlo_weight_bytes (outside host backing, the largest seen at any
block entry of a forward or between forwards), dlo_weight_bound_bytes (two slots of the
largest block + the resident parameters); dlo_bitwise_equal.

PSS: two probe processes (engine.offload.probe with the DiT's loader, DIT_PROBE) load the
DiT with private ordinary tensors, then with the checkpoint mmap backing (and, as the
baseline, without offload); each figure is the two processes' combined growth of
anonymous PSS from loading and one small denoising call, plus the PSS of the
transformer's safetensors mappings (MiB; mapping_pss_mib_* alone). diffusers' loader
leaves every parameter a view of the file mapping (page cache, shared), so resident
DiTs already share their weights; the "tensors" backing copies the streamed blocks into
private memory while the resident parameters keep the (touched) mapping alive. The
growth includes what loading allocates besides the weights, and on CPU the two slots
(the "device" memory) of each process.

Secondary keys (bench.offload_thinker): thinker_* (the thinker's block stack) and code2wav_*.

--quick runs every part at its smallest: a DiT of 2 blocks (QUICK_DIT, its own cached
checkpoint), one timed round, the PSS probe pair of the mmap backing alone (QUICK_PSS),
16 thinker tokens, 4 code2wav frames, one repeat each; a check that the benchmark runs,
not figures to read (key `model` names the DiT).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from bench.output import print_table, write_json

RESOLUTION, STEPS, TEXT_TOKENS = 256, 8, 77 + 77  # bench.image's defaults (CLIP 77 + T5 max_sequence_length 77)
DIT = dict(num_layers=12, num_attention_heads=6, attention_head_dim=64)
QUICK_DIT = {**DIT, "num_layers": 2}
DIT_PROBE = "engine.models.sd3.offload_probe:load_dit"  # the weights probe's loader for an SD3 DiT


def checkpoint(root: str, dit: dict = DIT) -> str:
    """bench.image's SD3 checkpoint with the larger DiT (module docstring), built once."""
    import torch
    from diffusers import SD3Transformer2DModel

    from engine.models.sd3.tiny import PRESETS, make_tiny_sd3

    path = os.path.join(root, "sd3-offload-bench-{num_layers}x{num_attention_heads}x{attention_head_dim}".format(**dit))
    if os.path.exists(os.path.join(path, "model_index.json")):
        return path
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=root, prefix=".tmp-sd3-")
    make_tiny_sd3(tmp, seed=0, preset="bench")
    config = {**PRESETS["bench"]["transformer"], **dit,
              "caption_projection_dim": dit["num_attention_heads"] * dit["attention_head_dim"]}
    torch.manual_seed(1)
    shutil.rmtree(os.path.join(tmp, "transformer"))
    SD3Transformer2DModel(**config).save_pretrained(os.path.join(tmp, "transformer"), safe_serialization=True)
    try:
        os.rename(tmp, path)
    except OSError:  # another run built it meanwhile
        shutil.rmtree(tmp)
    return path


class DitStep:
    """One denoising step's transformer call of an Sd3Dit (the CFG batch of 2 at
    RESOLUTION), timed, its transformer blocks timed by hooks."""

    def __init__(self, dit) -> None:
        import torch

        self.dit, g = dit, torch.Generator().manual_seed(0)
        side = RESOLUTION // dit.geometry.vae_scale_factor
        latent = torch.randn(1, dit.geometry.latent_channels, side, side, generator=g)  # [1, C, h, w]
        t = dit.schedule.get(STEPS, (side, side)).timesteps[0]
        branches = [(torch.randn(1, TEXT_TOKENS, dit.embed_dims[0], generator=g),  # [1, S, D]
                     torch.randn(1, dit.embed_dims[1], generator=g)) for _ in ("cond", "uncond")]  # [1, P]
        self.payloads = [(latent, e, p, t) for e, p in branches]
        self.blocks = list(dit.transformer.transformer_blocks)
        for block in self.blocks:
            block.register_forward_pre_hook(lambda m, a: self._enter())
            block.register_forward_hook(lambda m, a, o: self._leave())
        self.times, self.block_ms, self.output = [], [], None
        self._t0 = self._blocks_s = 0.0

    def _enter(self) -> None:
        self._t0 = time.perf_counter()

    def _leave(self) -> None:
        self._blocks_s += time.perf_counter() - self._t0

    def __call__(self) -> None:
        self._blocks_s = 0.0
        t0 = time.perf_counter()
        self.output = self.dit.denoise(self.payloads)
        self.times.append((time.perf_counter() - t0) * 1e3)
        self.block_ms.append(self._blocks_s / len(self.blocks) * 1e3)

    def reset(self) -> None:
        self.times, self.block_ms = [], []


def interleaved(resident: DitStep, dlo: DitStep, rounds: int) -> None:
    """A warm-up of each, then `rounds` rounds of both, the order swapped every round."""
    resident(), dlo()
    resident.reset(), dlo.reset()
    dlo.dit.transformer.offload_backend.reset_stats()  # count the timed forwards only
    for i in range(rounds):
        for step in ((resident, dlo) if i % 2 == 0 else (dlo, resident)):
            step()


def speed_figures(resident: DitStep, dlo: DitStep) -> dict:
    import torch

    med = statistics.median
    stats = dlo.dit.transformer.offload_backend.stats
    out = {"resident_ms": med(resident.times), "dlo_ms": med(dlo.times),
           "resident_ms_best": min(resident.times), "dlo_ms_best": min(dlo.times),
           "resident_ms_rounds": list(resident.times), "dlo_ms_rounds": list(dlo.times),
           "compute_ms_per_block": med(resident.block_ms), "dlo_compute_ms_per_block": med(dlo.block_ms),
           "copy_ms_per_block": stats.copy_s / max(stats.fills_waited, 1) * 1e3,
           "wait_ms_per_block": stats.wait_s / max(stats.blocks_run, 1) * 1e3, "dlo_misses": stats.misses,
           "dlo_bitwise_equal": all(torch.equal(a, b) for a, b in zip(resident.output, dlo.output))}
    out["dlo_over_resident"] = med([b / a for a, b in zip(resident.times, dlo.times)])
    out["dlo_over_resident_of_medians"] = out["dlo_ms"] / out["resident_ms"]
    out["dlo_over_resident_best"] = out["dlo_ms_best"] / out["resident_ms_best"]
    out["blocks_share_of_resident_forward"] = out["compute_ms_per_block"] * len(resident.blocks) / out["resident_ms"]
    return out


def copy_idle_ms(backend) -> float:
    """Median time of copying one block's bytes into a scratch slot, nothing else running."""
    import torch

    scratch = torch.empty(backend.transfer.slot_bytes, dtype=torch.uint8)
    times = []
    for i in range(len(backend.plan.blocks)):
        t0 = time.perf_counter()
        backend.transfer.fill(i, 0, scratch)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def weight_figures(resident, dlo: DitStep) -> dict:
    """Weight bytes outside host backing, the DLO figure the largest seen at any block
    entry of one forward (a block's parameters are then views of its slot) or outside."""
    from engine.offload.memory import param_bytes, weight_bytes

    model, backend = dlo.dit.transformer, dlo.dit.transformer.offload_backend
    seen = [weight_bytes(model, backend)]
    hooks = [b.register_forward_pre_hook(lambda m, a: seen.append(weight_bytes(model, backend))) for b in dlo.blocks]
    dlo()
    for h in hooks:
        h.remove()
    plan = backend.plan
    out = {"resident_weight_bytes": weight_bytes(resident), "dlo_weight_bytes": max(seen),
           "dlo_weight_bound_bytes": 2 * plan.slot_bytes + param_bytes(resident, plan.streamed_names),
           "block_bytes": plan.slot_bytes, "num_blocks": len(plan.blocks), "streamed_bytes": plan.streamed_bytes}
    out["dlo_over_resident_weight_bytes"] = out["dlo_weight_bytes"] / out["resident_weight_bytes"]
    return out


def measure_dit(ckpt: str, rounds: int) -> dict:
    from engine.offload.config import OffloadConfig
    from engine.models.sd3.dit import Sd3Dit

    resident = DitStep(Sd3Dit.load(ckpt))
    dlo = DitStep(Sd3Dit.load(ckpt, offload=OffloadConfig(enabled=True)))
    backend = dlo.dit.transformer.offload_backend
    interleaved(resident, dlo, rounds)
    out = speed_figures(resident, dlo)
    out.update(weight_figures(resident.dit.transformer, dlo))
    out["copy_ms_per_block_idle"] = copy_idle_ms(backend)
    out["copy_gb_per_s_idle"] = backend.plan.slot_bytes / out["copy_ms_per_block_idle"] / 1e6
    out["copy_over_compute"] = out["copy_ms_per_block"] / out["compute_ms_per_block"]
    backend.disable()
    return out


PSS_BACKINGS = {"private": "tensors", "mmap": "mmap", "resident": "none"}  # key suffix -> host backing
# --quick: the mmap backing's probe pair alone (its headline key); the other backings'
# loads run in the timed part (resident and DLO DiTs), and each pair costs two processes
# that import torch and diffusers
QUICK_PSS = ("mmap",)


def measure_pss(ckpt: str, names: tuple[str, ...] = tuple(PSS_BACKINGS)) -> dict:
    from engine.offload.probe import two_process_pss

    out = {"pss_host_kinds": {}}
    for name, backing in ((n, PSS_BACKINGS[n]) for n in names):
        got = two_process_pss(ckpt, backing, loader=DIT_PROBE)
        out[f"pss_mib_two_processes_{name}"] = got["weights_pss_kib"] / 1024
        out[f"mapping_pss_mib_two_processes_{name}"] = got["mapping_pss_kib"] / 1024
        out[f"mapping_rss_mib_per_process_{name}"] = got["mapping_rss_kib"][0] / 1024
        out["pss_host_kinds"][name] = got["host_kinds"]
    return out


ROWS = [("resident forward (median)", "resident_ms", "ms"), ("DLO forward (median)", "dlo_ms", "ms"),
        ("DLO / resident", "dlo_over_resident", "x (median of rounds; target <= 1.3)"),
        ("DLO / resident, best of each", "dlo_over_resident_best", "x"),
        ("copy per block", "copy_ms_per_block", "ms (copy thread, during forwards)"),
        ("copy per block, alone", "copy_ms_per_block_idle", "ms"),
        ("compute per block", "compute_ms_per_block", "ms (resident, hooks)"),
        ("compute per block, DLO", "dlo_compute_ms_per_block", "ms (while copying)"),
        ("wait per block, DLO", "wait_ms_per_block", "ms"),
        ("resident weights", "resident_weight_bytes", "bytes"),
        ("DLO weights (non-host)", "dlo_weight_bytes", "bytes"),
        ("bound: 2 blocks + resident", "dlo_weight_bound_bytes", "bytes"),
        ("PSS 2 procs no offload", "pss_mib_two_processes_resident", "MiB"),
        ("PSS 2 procs private", "pss_mib_two_processes_private", "MiB"),
        ("PSS 2 procs mmap", "pss_mib_two_processes_mmap", "MiB"),
        ("thinker DLO / resident", "thinker_dlo_over_resident", "x (prefill)"),
        ("thinker decode DLO / resident", "thinker_decode_dlo_over_resident", "x (bandwidth-bound)"),
        ("code2wav DLO / resident", "code2wav_dlo_over_resident", "x")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.offload", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--rounds", type=int, default=11, help="timed rounds (one resident + one DLO DiT call each)")
    p.add_argument("--thinker-tokens", type=int, default=128, help="thinker prefill tokens (0: skip the thinker)")
    p.add_argument("--code2wav-frames", type=int, default=16, help="code2wav window (0: skip code2wav)")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "starmesh-bench"))
    p.add_argument("--quick", action="store_true", help="smoke run: every part at its smallest (module docstring)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from bench import offload_thinker

    dit, repeats, pss = DIT, {"thinker": 5, "code2wav": 2}, tuple(PSS_BACKINGS)
    if args.quick:
        args.rounds, args.thinker_tokens, args.code2wav_frames = 1, 16, 4
        dit, repeats, pss = QUICK_DIT, {"thinker": 1, "code2wav": 1}, QUICK_PSS
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    ckpt = checkpoint(args.cache, dit)
    results = {"model": "random SD3Transformer2DModel, width {} ({} heads x {}), {} blocks, fp32".format(
        dit["num_attention_heads"] * dit["attention_head_dim"], dit["num_attention_heads"],
        dit["attention_head_dim"], dit["num_layers"]), "width": RESOLUTION, "height": RESOLUTION,
        "text_tokens": TEXT_TOKENS, "batch": 2, "rounds": args.rounds, "torch_threads": 1}
    print("measuring PSS of two processes", flush=True)
    results.update(measure_pss(ckpt, pss))  # first: a mapping in this process would take a share of the PSS
    print("timing resident and DLO DiT calls", flush=True)
    results.update(measure_dit(ckpt, args.rounds))
    if args.thinker_tokens:
        print("timing the thinker stack", flush=True)
        results.update(offload_thinker.measure_thinker(args.cache, args.thinker_tokens, repeats["thinker"]))
    if args.code2wav_frames:
        print("timing code2wav (real widths)", flush=True)
        results.update(offload_thinker.measure_code2wav(args.code2wav_frames, repeats["code2wav"]))
    results["targets_met"] = {"dlo_over_resident": results["dlo_over_resident"] <= 1.3,
                              "dlo_weight_bytes": results["dlo_weight_bytes"] <= results["dlo_weight_bound_bytes"]}
    results["runtime_s"] = time.perf_counter() - t_start
    print_table(ROWS, results)
    print(f"targets met: {results['targets_met']}; {results['runtime_s']:.0f} s")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
