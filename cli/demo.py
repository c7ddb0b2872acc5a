"""`starmesh demo`: the whole system once, on this machine, with tiny built-in models.

Starts the default deployment (`starmesh up`), speaks one sentence into a WAV file with
every model it serves that speaks text, generates one image into a PNG with the first
that draws, and with the first that draws and takes an image (BAGEL in the default
deployment) draws one more and edits it; prints time to first audio, real-time factor,
each image's latency and the first speech request's per-edge latency table read back
from the local trace store, then stops everything. Which models do what comes from the
conductor's ListModels.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
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
    p.add_argument("--edit-prompt", default="now make it night", help="the instruction of the edit")
    p.set_defaults(func=run)


def _cli_json(argv: list[str]) -> dict:
    """Runs a starmesh subcommand with --json in this process; its JSON line, parsed."""
    from cli.main import main
    from core.errors import StarmeshError

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--json"])
    if code != 0:
        raise StarmeshError(f"`starmesh {' '.join(argv)}` failed (exit {code})")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def _served(address: str) -> list:
    """The started conductor's model cards (client.model_card.ModelCard), in its order."""
    import asyncio

    from client.session import ConductorSession

    async def ask():
        async with ConductorSession(address) as session:
            return list((await session.models()).values())

    return asyncio.run(ask())


def _speak_argv(card, text: str, path: Path, address: str) -> list[str]:
    """One speech request, bounded: by codec frames where the model has them, else by tokens."""
    bound = ["--max-frames", "100"] if "max_frames" in card.params else ["--max-text-tokens", "140"]
    return ["speak", "--model", card.name, "--text", text, "-o", str(path), "--address", address, *bound]


def _speak_all(speakers: list, args, out: Path, address: str, rid: str) -> list[tuple[Path, dict]]:
    """Every model that speaks text, in the conductor's order: the first as `speech.wav`
    under request id `rid` (its edges are read back), the others as `<model>.wav`."""
    results = []
    for i, card in enumerate(speakers):
        path = out / ("speech.wav" if i == 0 else f"{card.name}.wav")
        print(f"speaking {args.text!r} with {card.name} ...", flush=True)
        argv = _speak_argv(card, args.text, path, address) + (["--request-id", rid] if i == 0 else [])
        results.append((path, _cli_json(argv)))
    return results


def _imagine(card, prompt: str, path: Path, address: str, *extra: str) -> tuple[Path, dict]:
    """One `starmesh imagine` request, few steps: (the PNG's path, its --json line)."""
    argv = ["imagine", "--model", card.name, "--prompt", prompt, "-o", str(path), "--conductor", address, *extra]
    return path, _cli_json(argv)


def first_editor(cards: list):
    """The first card that draws and takes an image (its walk input `media`): an editor."""
    return next((c for c in cards if c.makes("image") and c.takes(("media",))), None)


def _draw_all(cards: list, args, out: Path, address: str) -> list[tuple[Path, dict, str]]:
    """(path, imagine's result, what was asked) of the images: `image.png` from the first
    model that draws; from the first that draws and takes an image (an editor) one more,
    `<model>.png`, and its edit, `<model>-edit.png` (the edit's size is the model's
    resize of its input, so the draw asks the size it keeps)."""
    images = []
    painter = next((c for c in cards if c.makes("image")), None)
    if painter is not None:
        print(f"drawing {args.prompt!r} with {painter.name} ...", flush=True)
        path, got = _imagine(painter, args.prompt, out / "image.png", address, "--steps", "8", "--size", "128x128")
        images.append((path, got, "drawn"))
    editor = first_editor(cards)
    if editor is not None:
        print(f"drawing {args.prompt!r} with {editor.name}, then editing it: {args.edit_prompt!r} ...", flush=True)
        drawn, got = _imagine(editor, args.prompt, out / f"{editor.name}.png", address, "--steps", "4",
                              "--size", "512x512")
        images.append((drawn, got, "drawn"))
        path, got = _imagine(editor, args.edit_prompt, out / f"{editor.name}-edit.png", address, "--steps", "4",
                             "--image", str(drawn))
        images.append((path, got, f"edit of {drawn.name}"))
    return images


def run(args: argparse.Namespace) -> int:
    from cli.trace import print_edges
    from cli.up import start_errors
    from core.errors import StarmeshError
    from cluster.stack import start_stack
    from cluster.trace_store import wait_for_edges

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print("starting the deployment (the first run builds the tiny checkpoints) ...", flush=True)
    try:
        stack = start_stack(args.deployment, trace_store=True)
    except start_errors() as e:  # whatever started is stopped again: one line, not a traceback
        print(f"starmesh demo: the deployment did not start: {e}", file=sys.stderr, flush=True)
        return 2
    images, rows = [], []
    try:
        address, rid = stack.cluster.conductor_address, f"demo-{uuid.uuid4().hex[:8]}"
        cards = [c for c in _served(address) if c.accepts_text]
        speech = _speak_all([c for c in cards if c.makes("audio")], args, out, address, rid)
        images = _draw_all(cards, args, out, address)
        rows = wait_for_edges(stack.store, rid) if speech else []
    except StarmeshError as e:  # a request failed: its command printed the cause above
        print(f"starmesh demo: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        stack.stop()
    _print_results(speech, images)
    if rows:
        print(f"\nper-edge latency of speech request {rid} (from the trace store):")
        print_edges(rows)
    print(f"\ndemo took {time.perf_counter() - t0:.1f} s; everything is stopped", flush=True)
    return 0 if rows else 1


def _print_results(speech: list[tuple[Path, dict]], images: list[tuple[Path, dict, str]]) -> None:
    print()
    for path, got in speech:
        print(f"{path}: {got['audio_s']:.2f} s of audio in {got['num_chunks']} chunks")
        print(f"  time to first audio {got['ttfa_ms']:.1f} ms, real-time factor {got['rtf']:.3f}")
    for path, got, what in images:
        print(f"{path}: {got['width']}x{got['height']}, {got['latency_ms']:.0f} ms ({what} by {got['model']})")
