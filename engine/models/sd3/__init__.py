"""SD3 model code: checkpoint layout, the DiT, the text encoders, the VAE, the flow schedule
and the guidance math (services/dit hosts them as components)."""
