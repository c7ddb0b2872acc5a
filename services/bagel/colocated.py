"""BAGEL's backbone, its ViT tower (the encoder component) and its autoencoder (the vae
component) behind one `starmesh serve bagel` process (runtime.colocated)."""
from __future__ import annotations

from runtime.colocated import Colocated


def make_bagel(checkpoint: str, dtype: str | None = None, device: str = "cpu", max_batch_size: int = 16,
               num_blocks: int = 2048, block_size: int = 16) -> Colocated:
    from engine.stateless_engine import StatelessConfig
    from services.bagel import vae_hook
    from services.bagel.component import BagelComponent
    from services.bagel.vit_tower import BagelVitTower
    from services.encoder.component import MediaEncoderComponent
    from services.vae.component import VaeComponent

    backbone = BagelComponent.from_checkpoint(checkpoint, dtype, device, num_blocks, block_size, max_batch_size)
    tower = BagelVitTower.load(checkpoint, dtype, device)
    encoder = MediaEncoderComponent({"vision": tower}, StatelessConfig(max_batch_size=max_batch_size))
    vae = VaeComponent(vae_hook.load(checkpoint, dtype or "float32", device), vae_hook.BagelParams.from_params,
                       StatelessConfig(max_batch_size=max_batch_size))
    return Colocated([backbone, encoder, vae], "bagel")
