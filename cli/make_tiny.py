"""`starmesh make-tiny KIND DIR`: write a tiny random checkpoint (fixed seed) for tests and demos.

    starmesh make-tiny qwen3-omni ckpt/omni     # thinker + talker + code2wav, with a tokenizer
    starmesh make-tiny qwen3 ckpt/qwen3
"""
from __future__ import annotations

import argparse
import sys
import time

from cluster.registry import tiny_kinds


def add_parser(sub) -> None:
    p = sub.add_parser("make-tiny", help="write a tiny random checkpoint in Hugging Face layout",
                       description="Tiny random weights (fixed seed), built with the reference libraries' "
                                   "own classes; no network needed.")
    p.add_argument("kind", choices=tiny_kinds())
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cluster.registry import build_tiny

    t0 = time.perf_counter()
    print(f"building a tiny {args.kind} checkpoint in {args.directory} ...", file=sys.stderr)
    path = build_tiny(args.kind, args.directory, seed=args.seed)
    print(f"{path} ({time.perf_counter() - t0:.1f} s)")
    return 0
