"""What `starmesh rollout` and `starmesh plan` share: .npy inputs, one Generate call to
the conductor (client.session), tensor events by output name, as numpy arrays."""
from __future__ import annotations

import argparse
import sys

from cli.connection_args import add_client_args, connection_from_args


def add_common(p: argparse.ArgumentParser, outputs: tuple[str, ...]) -> None:
    p.add_argument("--model", help="model served by the conductor (default: the first model ListModels reports "
                                   f"that takes these inputs and gives {', '.join(outputs)})")
    p.add_argument("--frames", required=True, metavar="FILE.npy", help="context frames [F, 3, H, W] float32")
    p.add_argument("--actions", required=True, metavar="FILE.npy", help="actions [N, 7] float32")
    p.add_argument("--states", required=True, metavar="FILE.npy", help="end-effector states [N, 7] float32")
    p.add_argument("--horizon", type=int, default=0, help="predicted timesteps (0: the model's default)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_client_args(p, timeout_s=600.0)


def load_npy(path: str):
    import numpy as np

    return np.load(path, allow_pickle=False).astype("float32")


def generate(args: argparse.Namespace, tensors: dict, params: dict, outputs: tuple[str, ...]) -> tuple[str, dict]:
    """(the model that answered, output name -> numpy arrays in arrival order). Without
    --model, the first served model that takes `tensors` and gives `outputs`."""
    import asyncio

    return asyncio.run(_generate(args, tensors, params, outputs))


async def _generate(args: argparse.Namespace, tensors: dict, params: dict, outputs: tuple[str, ...]):
    from client.events import RawTensor
    from client.generate_call import GenerateCall
    from client.model_card import pick_model
    from client.session import ConductorSession

    out: dict = {}
    async with ConductorSession(connection_from_args(args)) as session:
        model = args.model or pick_model(await session.models(), takes=tensors, gives=outputs,
                                          field_name="--model").name
        call = GenerateCall(model, inputs=tensors, params=params)
        async for event in session.generate(call, timeout_s=args.timeout):
            if isinstance(event, RawTensor):
                out.setdefault(event.name, []).append(event.value)
    return model, out


def fail(command: str, e: Exception) -> int:
    print(f"starmesh {command}: {e}", file=sys.stderr)  # CallFailed reads "CODE: message"
    return 1
