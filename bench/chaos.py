"""Faults, abuse and overload, in one run: the figures of the reliability contracts.

    python -m bench.chaos --json bench-results/chaos.json [--quick]

Four parts, each its own module (run alone with `python -m bench.<part>`):
- bench.supervision.measure_chaos: kill -9 of each service kind of `starmesh up` under
  mixed speech and image requests: requests_failed_unrelated (must be 0),
  time_to_unavailable_ms_p99, restart_s, leaked_blocks and leaked_segments (must be 0);
- bench.fuzz.run_fuzz: random, truncated, bit-flipped and hostile messages on every RPC:
  fuzz_messages, fuzz_bad_statuses (must be 0), rss_growth_mb;
- bench.overload.measure_overload: 4x the admission limits of speech requests at once:
  overload_refused, overload_admitted_ttfa_ms_p99 (and the refusal latency, the idle
  time to first audio, the memory growth);
- bench.tls.measure_tls_hop: tls_hop_over_plain (target <= 1.2) and mtls_hop_over_plain
  (members-only TLS, the default, target <= 1.15);
- bench.chaos_front_door.measure_front_door: a 20 MB text beside live requests
  (expensive_request_victims_failed, must be 0) and 60 unauthenticated 20 MB requests
  (unauth_flood_rss_growth_mb, target <= 100);
- bench.chaos_hung.measure_hung_replica: a SIGSTOPped talker (hung_replica_detect_s,
  target <= 5; hung_replica_restart_s) beside a kill -9 and a busy, unconvicted replica;
- bench.chaos_gateway.measure_gateway_bad_input: gateway_5xx_on_bad_input (must be 0) and
  the gateway's memory under oversized chunked and concurrent bodies.
"""
from __future__ import annotations

import argparse
import os

from bench.output import write_json

KEYS = ("requests_failed_unrelated", "time_to_unavailable_ms_p99", "restart_s", "leaked_blocks", "leaked_segments",
        "fuzz_messages", "fuzz_bad_statuses", "rss_growth_mb", "overload_refused", "overload_admitted_ttfa_ms_p99",
        "tls_hop_over_plain", "mtls_hop_over_plain", "expensive_request_victims_failed",
        "unauth_flood_rss_growth_mb", "hung_replica_detect_s", "hung_replica_restart_s", "gateway_5xx_on_bad_input")
MUST_BE_ZERO = ("requests_failed_unrelated", "fuzz_bad_statuses", "leaked_blocks", "leaked_segments",
                "expensive_request_victims_failed", "gateway_5xx_on_bad_input")


def measure(args) -> dict:
    from bench import chaos_front_door, chaos_gateway, chaos_hung, fuzz, overload, supervision, tls
    from bench.speech import checkpoint

    results: dict = {}
    quick = args.quick  # every part at its own --quick size
    parts = {
        "chaos": lambda: supervision.measure_chaos(**supervision.QUICK) if quick else supervision.measure_chaos(2),
        "fuzz": lambda: fuzz.run_fuzz(num_messages=fuzz.QUICK_MESSAGES if quick else args.fuzz_messages),
        "overload": lambda: overload.measure_overload(checkpoint(args), **(overload.QUICK if quick else {})),
        "tls": lambda: tls.measure_tls_hop(**tls.QUICK) if quick else tls.measure_tls_hop(rounds=7),
        "front_door": lambda: chaos_front_door.measure_front_door(**(chaos_front_door.QUICK if quick else {})),
        "hung": lambda: chaos_hung.measure_hung_replica(**(chaos_hung.QUICK if quick else {})),
        "gateway": lambda: chaos_gateway.measure_gateway_bad_input(**(chaos_gateway.QUICK if quick else {})),
    }
    for name, run in parts.items():
        print(f"--- {name}", flush=True)
        part = run()
        results[name] = part
        results.update({k: v for k, v in part.items() if k in KEYS})
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--checkpoint", metavar="DIR", help="a Qwen3-Omni checkpoint for the overload part (default: tiny)")
    p.add_argument("--fuzz-messages", type=int, default=10_000)
    p.add_argument("--quick", action="store_true", help="smoke run: every part at its own --quick size")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = measure(args)
    print()
    for key in KEYS:
        value = results.get(key, "missing")
        flag = "" if key not in MUST_BE_ZERO else ("  ok" if value == 0 else "  NOT 0")
        print(f"{key:32s} {value}{flag}")
    for key, bound in (("tls_hop_over_plain", 1.2), ("mtls_hop_over_plain", 1.15), ("hung_replica_detect_s", 5.0),
                       ("unauth_flood_rss_growth_mb", 100.0)):
        value = results.get(key)
        if isinstance(value, (int, float)):
            print(f"target {key} {value:.3f} <= {bound:g} {'met' if value <= bound else 'NOT met'}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
