"""What batching code2wav windows buys on this machine: ms per window by window length and
batch size, against the same window alone (measured in the same run, rounds alternating).

    python -m bench.codec_batch [--rounds N] [--json PATH] [--quick]

Window lengths: 4 (a first window), 29 (the second: 4 of context + 25 new), 50 (steady
state: 25 + 25). `per_window_over_alone` < 1: batching pays; >= 1: a bigger batch only
holds the engine longer (services.qwen3_omni.code2wav.MAX_BATCH_FRAMES bounds a batch's frames).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.output import write_json

LENGTHS, SIZES = (4, 29, 50), (2, 4, 8, 16)


def _ms(model, codes) -> float:
    t0 = time.perf_counter()
    model.decode_windows(codes, [0] * codes.shape[0])
    return (time.perf_counter() - t0) * 1e3


def measure(checkpoint: str, rounds: int) -> dict:
    import torch

    from services.qwen3_omni.code2wav import Code2WavComponent

    torch.set_num_threads(1)  # as a service process
    model = Code2WavComponent.from_checkpoint(checkpoint).model
    q, size = model.config.num_quantizers, model.config.codebook_size
    out = {}
    with torch.no_grad():
        for t in LENGTHS:
            one = torch.randint(0, size, (1, t, q))
            _ms(model, one)
            for b in SIZES:
                many = torch.randint(0, size, (b, t, q))
                _ms(model, many)
                alone, batched = [], []
                for r in range(rounds):  # alternate which goes first
                    if r % 2 == 0:
                        alone.append(_ms(model, one))
                        batched.append(_ms(model, many) / b)
                    else:
                        batched.append(_ms(model, many) / b)
                        alone.append(_ms(model, one))
                ratios = [x / a for x, a in zip(batched, alone)]
                out[f"T{t}_B{b}"] = {"ms_alone": statistics.median(alone), "ms_per_window": statistics.median(batched),
                                     "per_window_over_alone": statistics.median(ratios)}
                print(f"T={t:2d} B={b:2d}: {out[f'T{t}_B{b}']['ms_per_window']:6.1f} ms per window, alone "
                      f"{out[f'T{t}_B{b}']['ms_alone']:5.1f} ms: ratio {out[f'T{t}_B{b}']['per_window_over_alone']:.2f}",
                      flush=True)
    return out


def main(argv=None) -> int:
    from bench.speech import checkpoint

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", metavar="DIR")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true", help="smoke run: one round (every length and batch size)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds = 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    write_json(args.json, measure(checkpoint(args), args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
