"""`starmesh imagine`: text to image through a conductor (or in-process), with a progress bar.

    starmesh imagine --model sd3 --prompt "a red fox" -o fox.png --conductor 127.0.0.1:50050
    starmesh imagine --checkpoint ckpt/sd3 --prompt "a red fox" -o fox.png --steps 8 --size 64x64 --json

The bar advances with the step events the denoising loop streams (output "step" =
[k, steps]); the image arrives as output "image" (uint8 [H, W, 3]) and is written as a
PNG. --json prints {"path", "latency_ms", "num_steps", "width", "height", ...}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zlib

from cli.connection_args import add_client_args, connection_from_args

DEFAULT_CONDUCTOR = "127.0.0.1:50050"


def add_parser(sub) -> None:
    p = sub.add_parser("imagine", help="generate an image from a text prompt",
                       description="Text to image through a conductor (--conductor) or in this process "
                                   "(--checkpoint, no services).")
    p.add_argument("--model", default="sd3", help="model name served by the conductor (default sd3)")
    p.add_argument("--prompt", required=True)
    p.add_argument("--negative-prompt", default="")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--steps", type=int, default=28)
    p.add_argument("--guidance", type=float, default=7.0)
    p.add_argument("--renorm", type=float, default=0.0, help="CFG renormalisation cap (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", default="1024x1024", metavar="WxH")
    p.add_argument("--max-sequence-length", type=int, help="T5 tokens (default 256)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--conductor", default=DEFAULT_CONDUCTOR, metavar="HOST:PORT")
    where.add_argument("--checkpoint", metavar="DIR", help="run every node in this process (no services)")
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--json", action="store_true", help="print latency and the image path as JSON")
    add_client_args(p)
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
    """uint8 [H, W, 3] -> an 8-bit RGB PNG (filter 0 rows, one zlib stream)."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].contiguous().numpy().tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6))
                + chunk(b"IEND", b""))


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
            image = _run_inprocess(args, params, bar)
        else:
            image = _run_remote(args, params, bar)
    except Exception as e:  # noqa: BLE001 - one line for the user, the exit status for scripts
        bar.close()
        print(f"starmesh imagine: {_describe(e)}", file=sys.stderr)
        return 1
    bar.close()
    latency_ms = (time.perf_counter() - t0) * 1e3
    write_png(args.output, image)
    if args.json:
        print(json.dumps({"path": args.output, "latency_ms": round(latency_ms, 3), "num_steps": bar.done,
                          "width": int(image.shape[1]), "height": int(image.shape[0]), "seed": args.seed,
                          "model": args.model}))
    else:
        print(f"{args.output} ({image.shape[1]}x{image.shape[0]}, {latency_ms:.0f} ms)")
    return 0


def _describe(e: Exception) -> str:
    import grpc

    if isinstance(e, grpc.RpcError):
        return f"{e.code().name}: {e.details()}"
    return str(e)


def _prompt_tensor(prompt: str):
    import torch

    return torch.tensor(list(prompt.encode("utf-8")), dtype=torch.uint8)  # [n]


def _run_remote(args: argparse.Namespace, params: dict, bar: ProgressBar):
    from protos.starmesh.v1 import conductor_pb2 as pb
    from protos.starmesh.v1 import conductor_pb2_grpc
    from transport.codec import inline_ref
    from transport.ref_proto import ref_to_proto

    req = pb.GenerateRequest(model=args.model)
    ref_to_proto(inline_ref(_prompt_tensor(args.prompt)), req.inputs.add(name="prompt").tensor)
    req.params.update(params)
    image = None
    with connection_from_args(args, args.conductor).channel() as ch:
        for event in conductor_pb2_grpc.ConductorStub(ch).Generate(req, timeout=args.timeout_s):
            if event.WhichOneof("kind") != "tensor":
                continue
            tensor = _tensor(event.tensor)
            if event.tensor.name == "step":
                bar.update(int(tensor[0]), int(tensor[1]))
            elif event.tensor.name == "image":
                image = tensor
    if image is None:
        raise RuntimeError(f"model {args.model!r} sent no image")
    return image


def _tensor(named):
    from transport.codec import view
    from transport.ref_proto import ref_from_proto

    ref = ref_from_proto(named.tensor, f"event.tensor[{named.name}]")
    if ref.kind != "inline":
        raise RuntimeError(f"output {named.name!r} arrived by {ref.kind} reference; serve the VAE with a larger "
                           "--inline-threshold so images travel inline to clients")
    return view(ref.location.data, ref.dtype, ref.shape).clone()


def _run_inprocess(args: argparse.Namespace, params: dict, bar: ProgressBar):
    import asyncio

    from conductor.executor_setup import inprocess_executor
    from pipelines.text_to_image import DENOISE_LOOP, text_to_image_graph
    from services.dit.colocated import sd3_components

    async def main():
        image = None
        graph = text_to_image_graph(args.model, fused=True)  # one process: the loop runs inside the DiT
        async with inprocess_executor(graph, sd3_components(args.checkpoint), {DENOISE_LOOP}) as ex:
            async for name, value in ex.generate("imagine", {"prompt": (_prompt_tensor(args.prompt),)}, params):
                if name == "step":
                    bar.update(int(value[0]), int(value[1]))
                elif name == "image":
                    image = value
        return image

    return asyncio.run(main())
