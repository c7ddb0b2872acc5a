"""What `starmesh rollout` and `starmesh plan` share: .npy inputs, one Generate call to
the conductor, tensor events by output name."""
from __future__ import annotations

import argparse
import sys

from cli.connection_args import add_client_args, connection_from_args


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="vjepa2-ac", help="model served by the conductor (default vjepa2-ac)")
    p.add_argument("--frames", required=True, metavar="FILE.npy", help="context frames [F, 3, H, W] float32")
    p.add_argument("--actions", required=True, metavar="FILE.npy", help="actions [N, 7] float32")
    p.add_argument("--states", required=True, metavar="FILE.npy", help="end-effector states [N, 7] float32")
    p.add_argument("--horizon", type=int, default=0, help="predicted timesteps (0: the model's default)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_client_args(p, timeout_s=600.0)


def load_npy(path: str):
    import numpy as np
    import torch

    return torch.from_numpy(np.load(path, allow_pickle=False).astype("float32"))


def generate(args: argparse.Namespace, tensors: dict, params: dict) -> dict:
    """Output name -> tensors in arrival order."""
    from protos.starmesh.v1 import conductor_pb2 as pb
    from protos.starmesh.v1 import conductor_pb2_grpc
    from transport.codec import inline_ref, view
    from transport.ref_proto import ref_from_proto, ref_to_proto

    req = pb.GenerateRequest(model=args.model)
    for name, value in tensors.items():
        ref_to_proto(inline_ref(value.contiguous()), req.inputs.add(name=name).tensor)
    req.params.update(params)
    out: dict = {}
    with connection_from_args(args).channel() as channel:
        for event in conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=args.timeout):
            if event.WhichOneof("kind") == "tensor":
                ref = ref_from_proto(event.tensor.tensor, f"event.tensor[{event.tensor.name}]")
                if ref.kind != "inline":
                    raise RuntimeError(f"output {event.tensor.name!r} arrived by {ref.kind} reference")
                out.setdefault(event.tensor.name, []).append(view(ref.location.data, ref.dtype, ref.shape).clone())
    return out


def fail(command: str, e: Exception) -> int:
    import grpc

    text = f"{e.code().name}: {e.details()}" if isinstance(e, grpc.RpcError) else str(e)
    print(f"starmesh {command}: {text}", file=sys.stderr)
    return 1
