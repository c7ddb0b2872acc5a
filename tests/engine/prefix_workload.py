"""Helpers of the prefix-cache tests: engines with every weight random, a logits recorder,
prompts sharing prefixes, and running a workload step by step with integrity checks."""
from __future__ import annotations

import random
from collections import defaultdict

import torch


def randomize(model, seed: int) -> None:
    """Every parameter random: norms' weights around 1, the rest around 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.3 * noise if "norm" in name else 0.2 * noise)


class Recorder:
    """Wraps an engine's sampler: every sampled row's logits, per request."""

    def __init__(self, sampler) -> None:
        self.sampler, self.logits = sampler, defaultdict(list)

    def __call__(self, logits, seqs):
        for seq, row in zip(seqs, logits):
            self.logits[seq.request_id].append(row.clone())
        return self.sampler(logits, seqs)


def recording(engine):
    engine.sampler = Recorder(engine.sampler)
    return engine


def shared_prompts(n: int, seed: int, vocab: int = 256, base_len: int = 40) -> list[list[int]]:
    """n prompts that take leading parts of one base (lengths block-aligned or not) and
    end in their own tokens."""
    rng = random.Random(seed)
    base = [rng.randrange(vocab) for _ in range(base_len)]
    return [base[:rng.randint(0, base_len)] + [rng.randrange(vocab) for _ in range(rng.randint(1, 9))]
            for _ in range(n)]


def run(engine, prompts: dict[str, list[int]], params, check=True, **add) -> dict[str, object]:
    """Adds every prompt, steps to the end (integrity checked each step); the finished
    StepOutput of each request, with `.logits` (its sampled rows) and `.rows` (its hidden
    / embeds handed out, concatenated) attached."""
    rows: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for rid, prompt in prompts.items():
        engine.add_request(rid, prompt, params, **add)
    done = {}
    while engine.has_work():
        for out in engine.step():
            for kind in ("hidden", "embeds"):
                if getattr(out, kind) is not None:
                    rows[out.request_id][kind].append(getattr(out, kind))
            if out.is_finished:
                done[out.request_id] = out
        if check:
            engine.check_integrity()
    for rid, out in done.items():
        out.logits = torch.stack(engine.sampler.logits.pop(rid))
        out.rows = {k: torch.cat(v) for k, v in rows[rid].items()}
    return done


def assert_same(ref, got, atol: float = 1e-4) -> None:
    """Greedy ids equal (a divergence only right after a near-tie of the reference) and the
    logits within fp32 tolerance up to it."""
    a, b = ref.output_ids, got.output_ids
    diverged = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    upto = len(a) if diverged is None else diverged + 1
    torch.testing.assert_close(got.logits[:upto], ref.logits[:upto], atol=atol, rtol=0)
    if diverged is not None:
        top = ref.logits[diverged].topk(2).values
        assert float(top[0] - top[1]) < 1e-4, (ref.request_id, a, b)
    else:
        assert a == b, ref.request_id
