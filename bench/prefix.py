"""Prefix caching and kept contexts through the mesh: `starmesh up` with two text models
on one checkpoint, one thinker with the prefix cache and one without, measured in
alternate rounds (medians of paired ratios).

    python -m bench.prefix --json bench-results/prefix.json [--quick]

The checkpoint (a random Qwen3, hidden 1024, 2 layers, context 4096, fp32) is sized so a
cold 1,024-token prefill costs well over 100 ms here. Keys:
- ttft_hit_over_miss: time to first token of a 1,024-token prompt cold, divided by the
  same with that prefix cached (a fresh 16-token suffix each time): the speed-up a hit
  gives (goal >= 5);
- chat_turn10_over_turn1_ttft: a 10-turn conversation continued from its kept context
  (each turn sends only its new tokens), time to first token of turn 10 over turn 1
  (goal <= 1.2), beside baseline_chat_turn10_over_turn1_ttft: the whole history re-sent
  each turn to the model without the cache;
- shared_prefix_throughput_ratio: 16 concurrent requests sharing a 512-token prefix
  (the prefix computed once before them), requests per second with the cache over
  without (goal >= 2);
- cache_overhead: 16 concurrent requests with nothing in common, cache on over off
  (goal >= 0.97: hashing and bookkeeping cost ~nothing when nothing hits).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time

from bench.output import print_table, write_json

# Wide and shallow: per token, a real LLM's projections and MLP cost far more than its
# attention over a few hundred tokens of context (hidden 2048+); at hidden 256 attention
# over a 550-token context alone costs ~36 % of the rest, which is then what a continued
# chat's later turns measure (1.33x at turn 10 with nothing recomputed). At hidden 1024
# it is ~9 %.
CONFIG = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=16,
              num_key_value_heads=4, head_dim=64, vocab_size=2048, max_position_embeddings=4096)
ON, OFF = "cached", "uncached"  # the two served models
THINKER = {"num_blocks": 2048, "block_size": 16, "max_num_batched_tokens": 2048}
QUICK = dict(rounds=1, prefix=128, turns=3, concurrent=4)


def deployment(checkpoint: str, base_port: int) -> str:
    """The two-model deployment file's text (ports from base_port)."""
    def service(name: str, port: int, cache: bool) -> str:
        options = {**THINKER, "prefix_cache": cache}
        opts = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
        return (f"  {name}: {{component: thinker, checkpoint: text, replicas: [\"127.0.0.1:{port}\"], "
                f"metrics: [\"127.0.0.1:{port + 1000}\"], options: {{{opts}}}}}\n")

    def model(name: str, svc: str) -> str:
        return f"  {name}:\n    pipeline: qwen3\n    placement: {{prefill: {svc}, decode: {svc}}}\n" \
               f"    kv_contexts: {{{svc}: [prefill, decode]}}\n"

    return (f"name: prefix-bench\ncheckpoints:\n  text: {{path: {checkpoint}}}\n"
            f"conductor: {{address: \"127.0.0.1:{base_port}\", metrics: \"127.0.0.1:{base_port + 1000}\"}}\n"
            f"services:\n{service('thinker_on', base_port + 1, True)}{service('thinker_off', base_port + 2, False)}"
            f"models:\n{model(ON, 'thinker_on')}{model(OFF, 'thinker_off')}")


def checkpoint(root: str) -> str:
    from engine.checkpoints.tiny_text import make_tiny

    path = os.path.join(root, "qwen3-prefix-bench-h1024")
    if not os.path.exists(os.path.join(path, "config.json")):
        make_tiny("qwen3", path, **CONFIG)
    return path


class Client:
    """One conductor session; `ask` sends input_ids and returns (ttft s, Usage)."""

    def __init__(self, session) -> None:
        self.session = session

    async def ask(self, model: str, ids: list[int], max_tokens: int = 1, **params):
        from client.events import TextDelta, Usage
        from client.generate_call import GenerateCall

        call = GenerateCall(model, input_ids=tuple(ids), params={"max_new_tokens": max_tokens, **params})
        t0, ttft, usage, out = time.perf_counter(), None, None, []
        async for ev in self.session.generate(call):
            if isinstance(ev, TextDelta) and ev.token_ids:
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                out += ev.token_ids
            elif isinstance(ev, Usage):
                usage = ev
        return ttft, usage, out


def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10, CONFIG["vocab_size"]) for _ in range(n)]


async def hit_over_miss(c: Client, rng: random.Random, prefix_len: int) -> float:
    """Cold TTFT over warm TTFT of one fresh prefix (the order alternates by the rng)."""
    prefix = tokens(rng, prefix_len)
    cold, _, _ = await c.ask(ON, prefix + tokens(rng, 16))
    warm, usage, _ = await c.ask(ON, prefix + tokens(rng, 16))
    assert usage.cached_prompt_tokens >= prefix_len - 16, f"no cache hit: {usage}"
    return cold / warm


async def chat(c: Client, rng: random.Random, turns: int, continued: bool) -> list[float]:
    """Each turn's TTFT (s): continued from kept contexts (cache on), or the whole history
    re-sent each turn (cache off)."""
    history, context, ttfts = [], None, []
    for _ in range(turns):
        user = tokens(rng, 48)
        if continued:
            params = {"keep_context": True, **({"context_id": context} if context else {})}
            ttft, usage, out = await c.ask(ON, user, 8, ignore_eos=True, **params)
            context = usage.context_id
        else:
            history += user
            ttft, usage, out = await c.ask(OFF, history, 8, ignore_eos=True)
            history += out
        ttfts.append(ttft)
    return ttfts


async def burst_rate(c: Client, model: str, prompts: list[list[int]]) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(*(c.ask(model, p, 4, ignore_eos=True) for p in prompts))
    return len(prompts) / (time.perf_counter() - t0)


async def shared_prefix(c: Client, rng: random.Random, n: int, prefix_len: int) -> float:
    """Requests/s of n concurrent requests sharing a prefix, cache on over off (a fresh
    prefix per model, computed once by a request before the burst on both)."""
    rates = {}
    for model in (ON, OFF) if rng.random() < 0.5 else (OFF, ON):
        prefix = tokens(rng, prefix_len)
        await c.ask(model, prefix + tokens(rng, 16))
        rates[model] = await burst_rate(c, model, [prefix + tokens(rng, 16) for _ in range(n)])
    return rates[ON] / rates[OFF]


async def all_miss(c: Client, rng: random.Random, n: int) -> float:
    rates = {}
    for model in (ON, OFF) if rng.random() < 0.5 else (OFF, ON):
        rates[model] = await burst_rate(c, model, [tokens(rng, 256) for _ in range(n)])
    return rates[ON] / rates[OFF]


async def measure_async(address: str, rounds: int, prefix: int, turns: int, concurrent: int) -> dict:
    from client.session import ConductorSession

    rng = random.Random(0)
    keys = ("ttft_hit_over_miss", "chat_turn10_over_turn1_ttft", "baseline_chat_turn10_over_turn1_ttft",
            "shared_prefix_throughput_ratio", "cache_overhead", "chat_turn1_ttft_ms", "chat_turn10_ttft_ms",
            "baseline_chat_turn1_ttft_ms", "baseline_chat_turn10_ttft_ms")
    samples: dict[str, list[float]] = {k: [] for k in keys}
    async with ConductorSession(address) as session:
        c = Client(session)
        await c.ask(ON, tokens(rng, 32))  # first requests load what loads lazily
        await c.ask(OFF, tokens(rng, 32))
        for r in range(rounds):
            samples["ttft_hit_over_miss"].append(await hit_over_miss(c, rng, prefix))
            for key, continued in (("chat", True), ("baseline_chat", False)):
                ttfts = await chat(c, rng, turns, continued)
                samples[f"{key}_turn10_over_turn1_ttft"].append(ttfts[-1] / ttfts[0])
                samples[f"{key}_turn1_ttft_ms"].append(1e3 * ttfts[0])
                samples[f"{key}_turn10_ttft_ms"].append(1e3 * ttfts[-1])
            samples["shared_prefix_throughput_ratio"].append(await shared_prefix(c, rng, concurrent, prefix // 2))
            samples["cache_overhead"].append(await all_miss(c, rng, concurrent))
            print(f"round {r + 1}/{rounds}: " + ", ".join(f"{k}={v[-1]:.3f}" for k, v in samples.items()), flush=True)
    out = {k: statistics.median(v) for k, v in samples.items()}
    out.update({f"{k}_rounds": v for k, v in samples.items()})
    out.update(rounds=rounds, prefix_tokens=prefix, chat_turns=turns, concurrent=concurrent)
    return out


def measure(rounds: int = 5, prefix: int = 1024, turns: int = 10, concurrent: int = 16, base_port: int = 52150) -> dict:
    from bench.up_process import UpProcess

    with tempfile.TemporaryDirectory(prefix="starmesh-prefix-") as tmp:
        root = os.environ.get("STARMESH_BENCH_CACHE", os.path.join(tempfile.gettempdir(), "starmesh-bench"))
        path = os.path.join(tmp, "prefix.yaml")
        with open(path, "w") as f:
            f.write(deployment(checkpoint(root), base_port))
        up = UpProcess(path).start()
        try:
            return asyncio.run(measure_async(up.conductor, rounds, prefix, turns, concurrent))
        finally:
            up.stop()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, shorter prompts and chats")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = measure(**QUICK) if args.quick else measure(args.rounds)
    print_table([("ttft miss / hit", "ttft_hit_over_miss", "x (goal >= 5)"),
                 ("chat turn 10 / turn 1", "chat_turn10_over_turn1_ttft", "x (goal <= 1.2)"),
                 ("  re-sent history", "baseline_chat_turn10_over_turn1_ttft", "x"),
                 ("shared prefix on / off", "shared_prefix_throughput_ratio", "x (goal >= 2)"),
                 ("all-miss on / off", "cache_overhead", "x (goal >= 0.97)")], results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
