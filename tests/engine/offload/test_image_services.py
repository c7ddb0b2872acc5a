"""Layerwise offload in the image services: the DiT and VAE components loaded with DLO
on (each host backing that applies) give bitwise the image of resident execution, and
only their two slots hold streamed weights."""
from __future__ import annotations

import asyncio

import pytest
import torch

from conductor.executor_setup import inprocess_executor
from engine.offload import OffloadConfig
from engine.offload.memory import param_bytes, weight_bytes
from pipelines.sd3.model import text_to_image_graph
from cluster.registry import build_component
from services.sd3.text import TextEncoderComponent
from tests.fixtures import tiny_sd3

pytestmark = pytest.mark.timeout(180)


def _image(offload) -> tuple[torch.Tensor, list]:
    ckpt = tiny_sd3.checkpoint()
    comps = [TextEncoderComponent.from_checkpoint(ckpt), build_component("dit", checkpoint=ckpt, offload=offload),
             build_component("vae", checkpoint=ckpt, offload=offload)]

    async def main():
        out = {}
        async with inprocess_executor(text_to_image_graph(), comps) as ex:
            async for name, value in ex.generate("r", {"prompt": (tiny_sd3.prompt_tensor(),)}, tiny_sd3.BASE):
                out.setdefault(name, []).append(value)
        return out

    try:
        return asyncio.run(main())["image_float"][0], comps
    finally:
        for c in comps:
            c.close()


@pytest.fixture(scope="module")
def resident():
    with tiny_sd3.one_thread():
        return _image(None)[0]


@pytest.mark.parametrize("backing", ["tensors", "mmap", "cache"])
def test_dit_and_vae_stream_their_blocks_bitwise(backing, resident, tmp_path):
    root = str(tmp_path / "cache") if backing == "cache" else ""
    config = OffloadConfig(enabled=True, host_backing=backing, host_cache_root=root)
    with tiny_sd3.one_thread():
        image, comps = _image(config)
    assert torch.equal(image, resident)
    dit, vae = comps[1].model.transformer, comps[2].model.vae
    kind = {"tensors": "tensors", "mmap": "checkpoint_mmap", "cache": "host_weight_cache"}[backing]
    for module, backend in ((dit, dit.offload_backend), (vae.decoder, vae.offload_backend)):
        assert backend is not None and len(backend.plan.blocks) > 1
        assert backend.host_kind == kind, backend.host_note  # no silent fallback to ordinary tensors
        # weight bytes outside host backing: the two slots plus the resident (non-streamed) parameters
        bound = 2 * backend.plan.slot_bytes + param_bytes(module, backend.plan.streamed_names)
        assert weight_bytes(module, backend) <= bound


def test_the_weights_probe_loads_a_dit_through_its_models_loader():
    """engine.offload.probe names no model: SD3's DiT comes through --loader."""
    from engine.offload.probe import start_probes, stop_probes

    ckpt = tiny_sd3.checkpoint()
    procs, reports = start_probes(ckpt, "mmap", count=1, loader="engine.models.sd3.offload_probe:load_dit")
    stop_probes(procs)
    assert reports[0]["host_kind"] == "checkpoint_mmap", reports[0]["host_note"]
    assert any(f.startswith(f"{ckpt}/transformer/") and f.endswith(".safetensors") for f in reports[0]["files"])
