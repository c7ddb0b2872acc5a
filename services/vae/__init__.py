"""The shared VAE component: decode latents to images and encode images to latents, for
any model whose vae hook recognises its checkpoint (services/vae/hook.py)."""
