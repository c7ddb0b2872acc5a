"""BAGEL (ByteDance-Seed/BAGEL-7B-MoT): one Qwen2 mixture-of-transformers backbone with
two experts per layer (understanding: text and ViT tokens; generation: VAE latent
tokens), a SigLIP NaViT vision tower and the FLUX autoencoder.

Checkpoint layout (the upstream release's directory, read as it is):
  llm_config.json   the Qwen2 decoder (model_type "qwen2"), read by config.py
  vit_config.json   the SigLIP vision tower
  ema.safetensors   language_model.*, vae2llm.*, llm2vae.*, time_embedder.*,
                    latent_pos_embed.* (the backbone, loader.py), vit_model.*,
                    connector.*, vit_pos_embed.* (the vision side, vit.py)
  ae.safetensors    the FLUX autoencoder (flux_vae.py)
  tokenizer files   Qwen2's, with the special tokens below
  bagel_defaults.json  optional, starmesh's own: overrides of the values upstream
                    hard-codes rather than reads (config.BagelDefaults)
"""
from __future__ import annotations

LLM_CONFIG = "llm_config.json"
VIT_CONFIG = "vit_config.json"
EMA_WEIGHTS = "ema.safetensors"
AE_WEIGHTS = "ae.safetensors"
DEFAULTS_FILE = "bagel_defaults.json"

# The prompt framing's special tokens (upstream: text decode starts with im_start and ends
# at im_end; an image sits between vision_start and vision_end).
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
START_OF_IMAGE = "<|vision_start|>"
END_OF_IMAGE = "<|vision_end|>"
SPECIAL_TOKENS = ("<|endoftext|>", BOS_TOKEN, EOS_TOKEN, START_OF_IMAGE, END_OF_IMAGE)

# Expert ids of the backbone's layers (engine/models/experts.py)
UNDERSTANDING, GENERATION = 0, 1
