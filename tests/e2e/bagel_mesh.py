"""A BAGEL mesh for end-to-end tests: two service processes on loopback and a conductor in
this process serving two placements of the same graph, over a tiny checkpoint with small
image sizes (tests/pipelines/bagel_cases.py).

    main   `starmesh serve bagel`: backbone + ViT tower + VAE co-located (one replica)
    cfg_b  `starmesh serve bagel_backbone`: a second backbone replica

    model "bagel"         every node on main: the denoising loop runs inside it (denoise)
    model "bagel_fanout"  every node on main, the loop fanned out to the velocity nodes and
                          combine (the conductor drives it)
    model "bagel_cfgp"    the cfg branches and their prefills on cfg_b (CFG-parallel)
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any

import torch

from conductor.metrics import ConductorMetrics
from pipelines.bagel.model import served_model
from protos.starmesh.v1 import conductor_pb2 as pb
from runtime.process import ServiceProcess
from services.encoder.media_list import pack_media
from tests.fixtures.services import conductor_server_over, describe
from transport.codec import inline_ref
from transport.ref_proto import ref_to_proto


@dataclass
class BagelMesh:
    address: str                     # the conductor's
    procs: dict[str, ServiceProcess]
    service: Any = None              # the conductor's ConductorService (its kept contexts, its metrics)

    def edge_hops(self, model: str, node: str) -> int:
        """Hops the conductor timed on edges into or out of `node` (runs of it, for short)."""
        families = self.service.metrics.edge_latency.collect()
        return sum(int(s.value) for f in families for s in f.samples if s.name.endswith("_count")
                   and s.labels["model"] == model and node in s.labels["edge"])

    def loads(self) -> dict:
        """Each process's ComponentInfo (its load report: the backbone's KV blocks among it)."""
        return {name: describe(p.address) for name, p in self.procs.items()}


@contextlib.contextmanager
def bagel_mesh(checkpoint: str):
    procs = {"main": ServiceProcess("bagel", ["--checkpoint", checkpoint], name="bagel-main", start_timeout_s=120),
             "cfg_b": ServiceProcess("bagel_backbone", ["--checkpoint", checkpoint], name="bagel-cfg-b",
                                     start_timeout_s=120)}

    def models(addresses):
        main, cfg_b = addresses
        return [served_model("bagel", main, main, main), served_model("bagel_fanout", main, main, main, fused=False),
                served_model("bagel_cfgp", main, main, main, cfg_b)]

    with conductor_server_over(list(procs.values()), models, metrics=ConductorMetrics()) as server:
        yield BagelMesh(server.address, procs, server.hosted)


def png(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def request(model: str, prompt: str, rid: str = "", images=(), text_only: bool = False, **params) -> pb.GenerateRequest:
    """text_only: a text answer wanted (the understand / chat walks)."""
    raw = ["text"] if text_only else ["image", "image_float", "step", "text"]
    req = pb.GenerateRequest(model=model, request_id=rid, raw_outputs=raw)
    if text_only:
        req.output_modalities.append(pb.MODALITY_TEXT)
    data = torch.frombuffer(bytearray(prompt.encode()), dtype=torch.uint8)
    ref_to_proto(inline_ref(data), req.inputs.add(name="prompt").tensor)
    if images:
        for name, tensor in pack_media([("image", png(im)) for im in images]).items():
            ref_to_proto(inline_ref(tensor), req.inputs.add(name=name).tensor)
    req.params.update({"return_float": True, **params})
    return req
