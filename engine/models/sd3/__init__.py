"""SD3 model code: checkpoint layout, the DiT, the text encoders, the VAE, the flow schedule
and the guidance math (the shared dit and vae components host them through SD3's hooks,
services/sd3/dit_hook.py and services/sd3/vae_hook.py)."""
