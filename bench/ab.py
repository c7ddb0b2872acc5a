"""A benchmark at another commit and at this tree, run alternately: the paired ratios.

    python -m bench.ab --base HEAD~1 [--rounds 3] [--json PATH] -- bench.routed_item --streams 16

The base revision is checked out once as a git worktree (under the temp dir, removed at
the end); each round runs the benchmark module there and here, in alternating order (a
machine that drifts favours neither), each run with `--json` to a file of its own. For
every flat numeric key both runs wrote: the median of each side and the median of the
rounds' paired ratios (this tree / base). What a benchmark writes stays its own: this
only runs it and pairs its figures, so a baseline is the previous code itself, not a
second path kept in the code for comparison.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench.output import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(cwd: str, module: str, args: list[str], out: str) -> dict:
    """One run of `python -m module args --json out` in `cwd`; its flat numeric figures."""
    env = {**os.environ, "PYTHONPATH": cwd, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", module, *args, "--json", out], cwd=cwd, env=env, check=True)
    with open(out) as f:
        figures = json.load(f)
    return {k: float(v) for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def paired(base: list[dict], head: list[dict]) -> dict:
    """{key: {base, head, head_over_base}}: medians of each side and of the paired ratios."""
    out = {}
    for key in sorted(set.intersection(*(set(r) for r in base + head))):
        ratios = [h[key] / b[key] for b, h in zip(base, head) if b[key]]
        out[key] = {"base": statistics.median(r[key] for r in base), "head": statistics.median(r[key] for r in head),
                    "head_over_base": statistics.median(ratios) if ratios else float("nan")}
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, bench = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", help="the git revision to compare with (e.g. HEAD~1)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the paired figures here")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: HEAD against this tree, 2 rounds of bench.routed_item --quick unless named")
    args = p.parse_args(ours)
    if args.quick:
        args.base, args.rounds = args.base or "HEAD", 2
        bench = bench or ["bench.routed_item", "--quick"]
    if not args.base:
        p.error("--base is required")
    if not bench:
        p.error("name the benchmark module after --, e.g. -- bench.routed_item")
    module, bench_args = bench[0], bench[1:]
    with tempfile.TemporaryDirectory(prefix="starmesh-ab-") as tmp:
        tree = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", "-q", tree, args.base], cwd=ROOT, check=True)
        try:
            base, head = [], []
            for r in range(args.rounds):
                sides = [("base", tree, base), ("head", ROOT, head)]
                for name, cwd, runs in sides if r % 2 == 0 else sides[::-1]:
                    print(f"round {r}: {name}", flush=True)
                    runs.append(run_once(cwd, module, bench_args, os.path.join(tmp, f"{name}-{r}.json")))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=False)
    results = paired(base, head)
    print(f"\n{'key':40s} {'base':>12s} {'head':>12s} {'head/base':>10s}")
    for key, r in results.items():
        print(f"{key:40s} {r['base']:12.3f} {r['head']:12.3f} {r['head_over_base']:10.3f}")
    write_json(args.json, {"base": args.base, "rounds": args.rounds, "module": module, "args": bench_args,
                           "figures": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
