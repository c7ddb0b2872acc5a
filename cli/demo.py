"""`starmesh demo`: the whole system once, on this machine, with tiny built-in models.

Starts the default deployment (`starmesh up`), speaks one sentence into a WAV file,
generates one image into a PNG, prints time to first audio, real-time factor, image
latency and the speech request's per-edge latency table read back from the local trace
store, then stops everything.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
import uuid
from pathlib import Path


def add_parser(sub) -> None:
    from cluster.deployment_dir import DEFAULT_DEPLOYMENT

    p = sub.add_parser("demo", help="start everything, speak a sentence, draw an image, show the traces, stop")
    p.add_argument("--deployment", default=str(DEFAULT_DEPLOYMENT), metavar="FILE")
    p.add_argument("--out-dir", default="demo-output", metavar="DIR", help="where the WAV and PNG go")
    p.add_argument("--text", default="Hello from starmesh!")
    p.add_argument("--prompt", default="a red fox in the snow")
    p.set_defaults(func=run)


def _cli_json(argv: list[str]) -> dict:
    """Runs a starmesh subcommand with --json in this process; its JSON line, parsed."""
    from cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    if code != 0:
        raise RuntimeError(f"`starmesh {' '.join(argv)}` failed (exit {code})")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    from cli.trace import print_edges
    from cluster.stack import start_stack
    from cluster.trace_store import wait_for_edges

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print("starting the deployment (the first run builds the tiny checkpoints) ...", flush=True)
    stack = start_stack(args.deployment, trace_store=True)
    try:
        address, rid = stack.cluster.conductor_address, f"demo-{uuid.uuid4().hex[:8]}"
        print(f"speaking {args.text!r} ...", flush=True)
        speech = _cli_json(["speak", "--model", "qwen3-omni", "--text", args.text, "-o", str(out / "speech.wav"),
                            "--address", address, "--request-id", rid, "--max-frames", "100"])
        print(f"speaking {args.text!r} with orpheus (voice tara) ...", flush=True)
        orpheus = _cli_json(["speak", "--model", "orpheus", "--voice", "tara", "--text", args.text,
                             "-o", str(out / "orpheus.wav"), "--address", address, "--max-text-tokens", "140"])
        print(f"drawing {args.prompt!r} ...", flush=True)
        image = _cli_json(["imagine", "--model", "sd3", "--prompt", args.prompt, "-o", str(out / "image.png"),
                           "--conductor", address, "--steps", "8", "--size", "128x128"])
        rows = wait_for_edges(stack.store, rid)
    finally:
        stack.stop()
    print(f"\n{out / 'speech.wav'}: {speech['audio_s']:.2f} s of audio in {speech['num_chunks']} chunks")
    print(f"  time to first audio {speech['ttfa_ms']:.1f} ms, real-time factor {speech['rtf']:.3f}")
    print(f"{out / 'orpheus.wav'}: {orpheus['audio_s']:.2f} s of audio in {orpheus['num_chunks']} chunks, "
          f"time to first audio {orpheus['ttfa_ms']:.1f} ms")
    print(f"{out / 'image.png'}: {image['width']}x{image['height']}, {image['latency_ms']:.0f} ms")
    print(f"\nper-edge latency of speech request {rid} (from the trace store):")
    print_edges(rows)
    print(f"\ndemo took {time.perf_counter() - t0:.1f} s; everything is stopped", flush=True)
    return 0 if rows else 1
