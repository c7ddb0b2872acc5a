"""SD3 image generation: text encoders, the DiT denoiser and the VAE as stateless components."""
