"""`starmesh make-tiny KIND DIR`: write a tiny random checkpoint (fixed seed) for tests and demos.

    starmesh make-tiny qwen3-omni ckpt/omni     # thinker + talker + code2wav, with a tokenizer
    starmesh make-tiny qwen3 ckpt/qwen3
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time

# kind -> "module:function(directory, seed=...)"; later issues add theirs (e.g. sd3).
BUILDERS = {
    "qwen3-omni": "engine.tiny_omni:make_tiny_omni",
    "qwen3": "engine.tiny:make_tiny_text",
    "qwen3-moe": "engine.tiny:make_tiny_text",
    "llama": "engine.tiny:make_tiny_text",
    "sd3": "engine.tiny_sd3:make_tiny_sd3",
}


def add_parser(sub) -> None:
    p = sub.add_parser("make-tiny", help="write a tiny random checkpoint in Hugging Face layout",
                       description="Tiny random weights (fixed seed), built with the reference libraries' "
                                   "own classes; no network needed.")
    p.add_argument("kind", choices=sorted(BUILDERS))
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    module, _, func = BUILDERS[args.kind].partition(":")
    build = getattr(importlib.import_module(module), func)
    t0 = time.perf_counter()
    print(f"building a tiny {args.kind} checkpoint in {args.directory} ...", file=sys.stderr)
    kwargs = {"kind": args.kind} if func == "make_tiny_text" else {}
    path = build(args.directory, seed=args.seed, **kwargs)
    print(f"{path} ({time.perf_counter() - t0:.1f} s)")
    return 0
