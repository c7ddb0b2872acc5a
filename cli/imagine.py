"""`starmesh imagine`: text (and an image to edit) to an image through a conductor (or
in-process), with a progress bar.

    starmesh imagine --model sd3 "a red fox" -o fox.png --conductor 127.0.0.1:50050
    starmesh imagine --model bagel "a red fox" -o fox.png --size 64x64 --steps 8
    starmesh imagine --model bagel --image fox.png "make it snowy" -o snowy.png --param cfg_img_scale=2
    starmesh imagine --checkpoint ckpt/sd3 --prompt "a red fox" -o fox.png --steps 8 --size 64x64 --json

The prompt is the positional argument or --prompt. --image IN.png (PNG or JPEG) sends an
image with it: a model that edits (BAGEL) draws the edited image, at the size of its
resized input. The options are sent as the model's params under the names its ListModels
card gives (cli/image_params.py): only those given, the model's defaults fill the rest;
--param KEY=VALUE sends any other param it lists.

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
    p.add_argument("text", nargs="?", metavar="PROMPT", help="the prompt (or --prompt)")
    p.add_argument("--prompt", help="the prompt (or the positional PROMPT)")
    p.add_argument("--image", metavar="IN.png", help="an image (PNG or JPEG) to edit (a model that takes images)")
    p.add_argument("--negative-prompt")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--steps", type=int, help="denoising steps (default: the model's)")
    p.add_argument("--guidance", type=float, help="text guidance scale (default: the model's)")
    p.add_argument("--renorm", type=float, help="CFG renormalisation cap (0: off)")
    p.add_argument("--seed", type=int)
    p.add_argument("--size", metavar="WxH", help="image size (default: the model's)")
    p.add_argument("--max-sequence-length", type=int, help="T5 tokens (default 256)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="any other param the model lists (`starmesh status`), e.g. cfg_img_scale=2; repeatable")
    p.add_argument("--checkpoint", metavar="DIR", help="run every node in this process (no services; "
                                                       "--conductor is not used)")
    p.add_argument("--json", action="store_true", help="print latency and the image path as JSON")
    add_client_args(p, timeout_s=600.0)
    p.set_defaults(func=run)


def prompt_of(args: argparse.Namespace) -> str:
    if (args.text is None) == (args.prompt is None):
        raise ValueError("give the prompt once: as PROMPT or as --prompt")
    if not (args.text or args.prompt):
        raise ValueError("the prompt is empty")
    return args.text if args.text is not None else args.prompt


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
    from cli.image_params import given_options

    try:
        prompt, options = prompt_of(args), given_options(args)
        image_in = _read(args.image) if args.image else None
        if args.checkpoint and image_in is not None:
            raise ValueError("--image goes to a conductor's model; --checkpoint's in-process run takes no image")
    except (ValueError, OSError) as e:
        print(f"starmesh imagine: {e}", file=sys.stderr)
        return 2
    bar = ProgressBar()
    t0 = time.perf_counter()
    try:
        if args.checkpoint:
            model, image, params = args.model or IN_PROCESS, _run_inprocess(args, prompt, options, bar), options
        else:
            model, image, params = _run_remote(args, prompt, image_in, options, bar)
    except ValueError as e:  # an option the model has no param for
        bar.close()
        print(f"starmesh imagine: {e}", file=sys.stderr)
        return 2
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
                          "width": width, "height": height, "seed": params.get("seed", 0), "model": model}))
    else:
        print(f"{args.output} ({width}x{height}, {latency_ms:.0f} ms)")
    return 0


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _describe(e: Exception) -> str:
    return str(e)  # a conductor's failure (client.call_failed.CallFailed) reads "CODE: message"


def _prompt_tensor(prompt: str):
    import torch

    return torch.tensor(list(prompt.encode("utf-8")), dtype=torch.uint8)  # [n]


def _run_remote(args, prompt: str, image_in: bytes | None, options: dict, bar: ProgressBar):
    """(the model that answered, its image event, the params sent); progress events move the bar."""
    import asyncio

    return asyncio.run(_remote(args, prompt, image_in, options, bar))


async def _remote(args, prompt: str, image_in: bytes | None, options: dict, bar: ProgressBar):
    from cli.image_params import card_params, client_aliases
    from client.events import Step
    from client.generate_call import GenerateCall, Media, Message
    from client.model_card import pick_model
    from client.session import ConductorSession, model_card

    image = None
    async with ConductorSession(connection_from_args(args)) as session:
        if args.model:
            card = await model_card(session, args.model)
        else:
            card = pick_model(await session.models(), makes="image", field_name="--model")
        params = card_params(options, card, client_aliases(card.name))
        if image_in is None:
            call = GenerateCall(card.name, text=prompt, params=params, output_modalities=("image",))
        else:  # the image first, then the instruction (BAGEL's order)
            message = Message("user", (Media("image", image_in), prompt))
            call = GenerateCall(card.name, messages=(message,), params=params, output_modalities=("image",))
        async for event in session.generate(call, timeout_s=args.timeout):
            if isinstance(event, Step):
                bar.update(event.step, event.num_steps)
            elif isinstance(event, Image) and image is None:
                image = event
    if image is None:
        raise RuntimeError(f"model {card.name!r} sent no image")
    return card.name, image, params


def _run_inprocess(args: argparse.Namespace, prompt: str, options: dict, bar: ProgressBar):
    import asyncio

    from cli.model_specifics import local_run
    from conductor.executor_setup import inprocess_executor

    params = {k.removeprefix("param:"): v for k, v in options.items()}  # the executor checks them

    async def main():
        image = None
        graph, components, loops = local_run(args.model, args.checkpoint, args.model or IN_PROCESS)
        async with inprocess_executor(graph, components, loops) as ex:
            async for name, value in ex.generate("imagine", {"prompt": (_prompt_tensor(prompt),)}, params):
                if name == "step":
                    bar.update(int(value[0]), int(value[1]))
                elif name == "image":
                    image = value
        return image

    return asyncio.run(main())
