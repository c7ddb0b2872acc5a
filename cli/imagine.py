"""`starmesh imagine`: text to image through a conductor (or in-process), with a progress bar.

    starmesh imagine --model sd3 --prompt "a red fox" -o fox.png --conductor 127.0.0.1:50050
    starmesh imagine --checkpoint ckpt/sd3 --prompt "a red fox" -o fox.png --steps 8 --size 64x64 --json

The bar advances with the step events the denoising loop streams (output "step" =
[k, steps]); the image arrives as output "image" (uint8 [H, W, 3]) and is written as a
PNG. --json prints {"path", "latency_ms", "num_steps", "width", "height", ...}.

Without --model, a conductor's request goes to the first model its ListModels reports
that makes images (the model that answered is in the --json line).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from cli.connection_args import add_client_args, connection_from_args
from client.events import Image

IN_PROCESS = "in-process"  # the graph's name without --model (no conductor to name one)


def add_parser(sub) -> None:
    p = sub.add_parser("imagine", help="generate an image from a text prompt",
                       description="Text to image through a conductor (--conductor) or in this process "
                                   "(--checkpoint, no services).")
    p.add_argument("--model", help="model name served by the conductor (default: the first model it lists "
                                   "that makes images)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--negative-prompt", default="")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--steps", type=int, default=28)
    p.add_argument("--guidance", type=float, default=7.0)
    p.add_argument("--renorm", type=float, default=0.0, help="CFG renormalisation cap (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", default="1024x1024", metavar="WxH")
    p.add_argument("--max-sequence-length", type=int, help="T5 tokens (default 256)")
    p.add_argument("--checkpoint", metavar="DIR", help="run every node in this process (no services; "
                                                       "--conductor is not used)")
    p.add_argument("--json", action="store_true", help="print latency and the image path as JSON")
    add_client_args(p, timeout_s=600.0)
    p.set_defaults(func=run)


def parse_size(text: str) -> tuple[int, int]:
    width, sep, height = text.lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise ValueError(f"--size {text!r} is not WxH, e.g. 1024x1024")
    return int(width), int(height)


def request_params(args: argparse.Namespace) -> dict:
    width, height = parse_size(args.size)
    params = {"steps": args.steps, "guidance": args.guidance, "renorm": args.renorm, "seed": args.seed,
              "width": width, "height": height, "negative_prompt": args.negative_prompt}
    if args.max_sequence_length is not None:
        params["max_sequence_length"] = args.max_sequence_length
    return params


class ProgressBar:
    """One line on stderr, redrawn per step event."""

    def __init__(self, stream=None, width: int = 30) -> None:
        self.stream, self.width, self.done = stream or sys.stderr, width, 0  # stderr as of now

    def update(self, step: int, num_steps: int) -> None:
        self.done = step
        filled = self.width * step // max(num_steps, 1)
        self.stream.write(f"\rdenoising [{'#' * filled}{'.' * (self.width - filled)}] {step}/{num_steps}")
        self.stream.flush()

    def close(self) -> None:
        if self.done:
            self.stream.write("\n")
            self.stream.flush()


def write_png(path: str, rgb) -> None:
    """uint8 [H, W, 3] -> an 8-bit RGB PNG file (conductor.png)."""
    from conductor.png import encode_png

    with open(path, "wb") as f:
        f.write(encode_png(rgb))


def run(args: argparse.Namespace) -> int:
    try:
        params = request_params(args)
    except ValueError as e:
        print(f"starmesh imagine: {e}", file=sys.stderr)
        return 2
    bar = ProgressBar()
    t0 = time.perf_counter()
    try:
        if args.checkpoint:
            model, image = args.model or IN_PROCESS, _run_inprocess(args, params, bar)
        else:
            model, image = _run_remote(args, params, bar)
    except Exception as e:  # noqa: BLE001 - one line for the user, the exit status for scripts
        bar.close()
        print(f"starmesh imagine: {_describe(e)}", file=sys.stderr)
        return 1
    bar.close()
    latency_ms = (time.perf_counter() - t0) * 1e3
    if isinstance(image, Image):
        with open(args.output, "wb") as f:
            f.write(image.data)
        width, height = image.width, image.height
    else:
        write_png(args.output, image)
        width, height = int(image.shape[1]), int(image.shape[0])
    if args.json:
        print(json.dumps({"path": args.output, "latency_ms": round(latency_ms, 3), "num_steps": bar.done,
                          "width": width, "height": height, "seed": args.seed, "model": model}))
    else:
        print(f"{args.output} ({width}x{height}, {latency_ms:.0f} ms)")
    return 0


def _describe(e: Exception) -> str:
    return str(e)  # a conductor's failure (client.call_failed.CallFailed) reads "CODE: message"


def _prompt_tensor(prompt: str):
    import torch

    return torch.tensor(list(prompt.encode("utf-8")), dtype=torch.uint8)  # [n]


def _run_remote(args: argparse.Namespace, params: dict, bar: ProgressBar) -> tuple[str, Image]:
    """(the model that answered, its image event); progress events move the bar."""
    import asyncio

    return asyncio.run(_remote(args, params, bar))


async def _remote(args: argparse.Namespace, params: dict, bar: ProgressBar) -> tuple[str, Image]:
    from client.events import Step
    from client.generate_call import GenerateCall
    from client.model_card import pick_model
    from client.session import ConductorSession

    image = None
    async with ConductorSession(connection_from_args(args)) as session:
        model = args.model or pick_model(await session.models(), makes="image", field_name="--model").name
        call = GenerateCall(model, text=args.prompt, params=params, output_modalities=("image",))
        async for event in session.generate(call, timeout_s=args.timeout):
            if isinstance(event, Step):
                bar.update(event.step, event.num_steps)
            elif isinstance(event, Image) and image is None:
                image = event
    if image is None:
        raise RuntimeError(f"model {model!r} sent no image")
    return model, image


def _run_inprocess(args: argparse.Namespace, params: dict, bar: ProgressBar):
    import asyncio

    from cli.model_specifics import local_run
    from conductor.executor_setup import inprocess_executor

    async def main():
        image = None
        graph, components, loops = local_run(args.model, args.checkpoint, args.model or IN_PROCESS)
        async with inprocess_executor(graph, components, loops) as ex:
            async for name, value in ex.generate("imagine", {"prompt": (_prompt_tensor(args.prompt),)}, params):
                if name == "step":
                    bar.update(int(value[0]), int(value[1]))
                elif name == "image":
                    image = value
        return image

    return asyncio.run(main())
