"""The talker engine's step, alone, at a few batch sizes: what its logit processing costs.

    python -m bench.talker_step [--checkpoint DIR] [--batch 1 4 16] [--json PATH]

Each round opens B requests on one TalkerEngine (the tiny checkpoint unless --checkpoint)
and times `--steps` engine steps (a thinker row pushed to each request before each step,
as the thinker streams them). Two settings alternate round by round on the same engine:
- `processed`: the talker's own params (HF generate's defaults: repetition penalty 1.05,
  every non-codec id suppressed, codec EOS suppressed before min_frames), greedy as the
  speech benchmarks run it: every row goes through the sampler's processed_logits;
- `plain` (the baseline): the same requests with nothing to process, one batched argmax.
processed_over_plain is the median of the rounds' paired ratios of step time: the share of
a step that the per-row processing adds.

Then what a request's thinker rows cost as they arrive (`--rows`, at the thinker width of
Qwen3-Omni's 30B-A3B, 2048): one row added and read back per talker step, as the engine's
_feed does, in us per row at the short and the long count; long_over_short (same run, paired
rounds) is 1.0 when a row costs the same however many came before it.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from bench.output import write_json


def step_ms(engine, params, batch: int, steps: int, prompt: list[int], tag: str) -> float:
    """Median engine step (ms) with `batch` requests of `params`, after two warm steps."""
    import torch

    width = engine.spec.thinker_hidden_size
    rows = torch.randn(len(prompt) + steps + 2, width, generator=torch.Generator().manual_seed(0))
    for i in range(batch):
        engine.add_request(f"{tag}-{i}", prompt, params, embeds=rows[:len(prompt)])
    times = []
    try:
        for s in range(steps + 2):
            for i in range(batch):
                engine.push_thinker(f"{tag}-{i}", rows[len(prompt) + s:len(prompt) + s + 1])
            t0 = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t0)
    finally:
        for i in range(batch):
            engine.abort(f"{tag}-{i}")
        engine.step()
    return statistics.median(times[2:]) * 1e3


def measure(checkpoint: str, batches: list[int], steps: int, rounds: int) -> dict:
    import torch

    from engine.models.qwen3_omni.tiny import chat_prompt
    from engine.engine_config import EngineConfig
    from engine.models.qwen3_omni.talker_engine import TalkerEngine

    torch.set_num_threads(1)
    engine = TalkerEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint))
    prompt = chat_prompt("Tell me a story about the sea, please")
    frames = steps + 8
    processed = engine.talker_params(max_new_tokens=frames, temperature=0.0, min_new_tokens=frames)
    settings = {"processed": processed,
                "plain": replace(processed, repetition_penalty=1.0, suppress_token_ids=(), min_new_tokens=0)}
    out = {}
    for b in batches:
        got = {name: [] for name in settings}
        for r in range(rounds + 1):  # round 0 warms up
            order = list(settings) if r % 2 == 0 else list(settings)[::-1]
            for name in order:
                ms = step_ms(engine, settings[name], b, steps, prompt, f"b{b}-r{r}-{name}")
                if r:
                    got[name].append(ms)
        out[f"b{b}"] = {"processed_step_ms": statistics.median(got["processed"]),
                        "plain_step_ms": statistics.median(got["plain"]),
                        "processed_over_plain": statistics.median(p / q for p, q in zip(got["processed"],
                                                                                         got["plain"]))}
        print(f"batch {b:3d}: step {out[f'b{b}']['processed_step_ms']:.2f} ms (plain argmax "
              f"{out[f'b{b}']['plain_step_ms']:.2f} ms), processed / plain "
              f"{out[f'b{b}']['processed_over_plain']:.3f}", flush=True)
    return out


def row_us(num_rows: int, width: int) -> float:
    """us per arriving thinker row over `num_rows` rows of `width` (add, then read it back)."""
    import torch

    from engine.sampling_params import SamplingParams
    from engine.models.qwen3_omni.talker_request import TalkerRequest

    req = TalkerRequest("rows", [5, 1, 2, 7], SamplingParams(max_new_tokens=4), 0,
                        {"im_start_token_id": 1, "assistant_token_id": 2})
    req.add_rows(torch.randn(4, width), None)
    row = torch.randn(1, width)
    t0 = time.perf_counter()
    for i in range(num_rows):
        req.add_rows(row, None)
        req.rows(4 + i, 5 + i)
    return (time.perf_counter() - t0) / num_rows * 1e6


def rows_phase(counts: tuple[int, int], rounds: int, width: int = 2048) -> dict:
    short, long = counts
    pairs = [(row_us(short, width), row_us(long, width)) for _ in range(rounds)]
    out = {"rows_width": width, f"row_us_at_{short}": statistics.median(s for s, _ in pairs),
           f"row_us_at_{long}": statistics.median(x for _, x in pairs),
           "rows_long_over_short": statistics.median(x / s for s, x in pairs)}
    print(f"thinker rows of width {width}: {out[f'row_us_at_{short}']:.1f} us per row at {short} rows, "
          f"{out[f'row_us_at_{long}']:.1f} at {long}: long / short {out['rows_long_over_short']:.2f}", flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", metavar="DIR", help="a Qwen3-Omni checkpoint (default: the tiny one)")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--steps", type=int, default=30, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=4, help="rounds per setting and batch size")
    p.add_argument("--rows", type=int, nargs=2, default=[250, 2000], metavar=("SHORT", "LONG"),
                   help="thinker rows per request of the row-arrival phase")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true", help="smoke run: batch 1, 2 steps, one round, 10 and 20 rows")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.steps, args.rounds, args.rows = [1], 2, 1, [10, 20]
    checkpoint = args.checkpoint
    if checkpoint is None:
        from cluster.checkpoints import tiny

        checkpoint = str(tiny("qwen3-omni", print))  # the cached one `starmesh up` uses, built on first use
    results = measure(checkpoint, args.batch, args.steps, args.rounds)
    results.update(rows_phase(tuple(args.rows), args.rounds))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
