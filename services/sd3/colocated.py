"""The text encoders, the DiT and the VAE of one SD3 checkpoint behind one
`starmesh serve sd3` process (runtime.colocated)."""
from __future__ import annotations

from runtime.colocated import Colocated
from core.errors import InvalidArgument


def make_sd3(checkpoint: str, dtype: str = "float32", device: str = "cpu", max_batch_size: int = 8,
             nodes: list[str] | None = None) -> Colocated:
    """Text encoders + DiT + VAE of `checkpoint` in one process (`starmesh serve sd3`);
    `nodes` keeps only the components hosting those nodes (e.g. ["denoise_cond", ...])."""
    return Colocated(sd3_components(checkpoint, dtype, device, max_batch_size, nodes), "sd3")


def sd3_components(checkpoint: str, dtype: str = "float32", device: str = "cpu", max_batch_size: int = 8,
                   nodes: list[str] | None = None) -> list:
    """The components of `checkpoint` hosting `nodes` (default: every node of the
    text-to-image graph), in graph order: text encoders, DiT, VAE; also what an
    in-process executor runs (`starmesh imagine --checkpoint`)."""
    from services.dit.denoiser import DitComponent
    from services.sd3 import dit_hook, vae_hook
    from services.sd3.text import TextEncoderComponent
    from services.vae.component import VaeComponent

    kinds = {"text_encoder": TextEncoderComponent.nodes_of(), "dit": DitComponent.nodes_of(dit_hook.BRANCHES),
             "vae": VaeComponent.nodes}
    wanted = set(nodes) if nodes else {n for group in kinds.values() for n in group}
    unknown = wanted - {n for group in kinds.values() for n in group}
    if unknown:
        raise InvalidArgument(f"nodes {sorted(unknown)} are not SD3 nodes")
    components = []
    if wanted & set(kinds["text_encoder"]):
        components.append(TextEncoderComponent.from_checkpoint(checkpoint, dtype, device,
                                                               max_batch_size=max_batch_size))
    if wanted & set(kinds["dit"]):
        components.append(DitComponent.from_checkpoint(checkpoint, dtype, device, max_batch_size,
                                                       hooks=(dit_hook.HOOK,)))
    if wanted & set(kinds["vae"]):
        components.append(VaeComponent.from_checkpoint(checkpoint, dtype, device, hooks=(vae_hook.HOOK,)))
    return components
