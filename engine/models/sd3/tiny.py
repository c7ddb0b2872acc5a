"""A tiny random Stable Diffusion 3 checkpoint in diffusers layout, built offline.

`make_tiny_sd3(dir, seed=0, preset="tiny")` builds the real classes (diffusers'
SD3Transformer2DModel, AutoencoderKL and FlowMatchEulerDiscreteScheduler, transformers'
CLIPTextModelWithProjection x2 and T5EncoderModel) with a fixed seed in fp32 and saves
them as one StableDiffusion3Pipeline (model_index.json + one folder per component), so
diffusers itself can load the checkpoint as the reference.

Tokenizers are made locally: the CLIP tokenizers are byte-level BPE without merges
(every byte, alone and as a word end "</w>", is a token), the T5 tokenizer a unigram
over printable ASCII. Gotchas: the AutoencoderKL needs `shift_factor` (SD3 decodes
latents / scaling + shift); a saved pipeline reloads with the absent optional
components passed as None (`image_encoder=None, feature_extractor=None`).

Presets: "tiny" (tests: a step costs ~1 ms) and "bench" (a CFG step of batch 2 costs
tens of ms at one thread; see bench/image.py).
"""
from __future__ import annotations

from pathlib import Path

import torch

CLIP_SPECIAL = ("<|startoftext|>", "<|endoftext|>")  # ids 0, 1
T5_SPECIAL = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 (T5's layout)
CLIP_VOCAB = len(CLIP_SPECIAL) + 2 * 256

def _preset(latent_channels: int, heads: int, head_dim: int, t5_dim: int, clip_l: int, clip_g: int,
            sample_size: int, pos_embed_max_size: int) -> dict:
    """Widths of one preset: the DiT is `heads` x `head_dim` wide; its text input is
    T5's width (the CLIP features clip_l + clip_g are zero-padded to it)."""
    def clip(width: int) -> dict:
        return dict(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=2,
                    projection_dim=width)

    return dict(
        transformer=dict(sample_size=sample_size, patch_size=2, in_channels=latent_channels,
                         out_channels=latent_channels, num_layers=2, attention_head_dim=head_dim,
                         num_attention_heads=heads, caption_projection_dim=heads * head_dim,
                         joint_attention_dim=t5_dim, pooled_projection_dim=clip_l + clip_g,
                         pos_embed_max_size=pos_embed_max_size),
        clip_l=clip(clip_l), clip_g=clip(clip_g),
        t5=dict(d_model=t5_dim, d_kv=t5_dim // 4, d_ff=t5_dim, num_layers=1, num_heads=4),
        vae=dict(block_out_channels=(8, 8, 16, 16), norm_num_groups=4, latent_channels=latent_channels),
        max_length=77,
    )


PRESETS = {
    # latent channels 4, DiT width 32; text: clip_l 32 + clip_g 16 (padded to T5's 64)
    "tiny": _preset(4, heads=2, head_dim=16, t5_dim=64, clip_l=32, clip_g=16, sample_size=8, pos_embed_max_size=32),
    # a DiT step of batch 2 at 256x256 (32x32 latents, 256 image tokens) is ~45 ms at one thread
    "bench": _preset(16, heads=6, head_dim=32, t5_dim=128, clip_l=64, clip_g=32, sample_size=32,
                     pos_embed_max_size=64),
}


def clip_tokenizer(max_length: int):
    """Byte-level BPE without merges: a word is its bytes, the last one with "</w>"."""
    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    vocab = {tok: i for i, tok in enumerate(CLIP_SPECIAL)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
        vocab[char + "</w>"] = len(vocab)
    assert len(vocab) == CLIP_VOCAB
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=max_length)


def t5_tokenizer(max_length: int):
    """A unigram over printable ASCII plus the word-start marker; no extra ids."""
    from transformers import T5Tokenizer

    pieces = [(tok, 0.0) for tok in T5_SPECIAL] + [("\u2581", -2.0)]
    pieces += [(chr(c), -3.0) for c in range(33, 127)]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=max_length)


def _text_encoders(preset: dict):
    import transformers as tf

    common = dict(vocab_size=CLIP_VOCAB, max_position_embeddings=preset["max_length"], bos_token_id=0,
                  eos_token_id=1, pad_token_id=1, hidden_act="gelu", initializer_range=0.05)
    clip_l = tf.CLIPTextModelWithProjection(tf.CLIPTextConfig(**common, **preset["clip_l"]))
    clip_g = tf.CLIPTextModelWithProjection(tf.CLIPTextConfig(**common, **preset["clip_g"]))
    t5 = tf.T5EncoderModel(tf.T5Config(vocab_size=128, relative_attention_num_buckets=8, pad_token_id=0,
                                       eos_token_id=1, decoder_start_token_id=0, initializer_factor=0.5,
                                       **preset["t5"]))
    return clip_l, clip_g, t5


def _vae(preset: dict):
    from diffusers import AutoencoderKL

    num_blocks = len(preset["vae"]["block_out_channels"])
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * num_blocks,
                         up_block_types=("UpDecoderBlock2D",) * num_blocks, layers_per_block=1, sample_size=32,
                         scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
                         use_post_quant_conv=False, **preset["vae"])


def build_pipeline(preset: str = "tiny", seed: int = 0):
    """The random StableDiffusion3Pipeline of `preset` (fp32, eval mode)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    if preset not in PRESETS:
        raise ValueError(f"make_tiny_sd3: preset {preset!r} is not one of {sorted(PRESETS)}")
    spec = PRESETS[preset]
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(**spec["transformer"])
    clip_l, clip_g, t5 = _text_encoders(spec)
    vae = _vae(spec)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=clip_l, tokenizer=clip_tokenizer(spec["max_length"]),
        text_encoder_2=clip_g, tokenizer_2=clip_tokenizer(spec["max_length"]),
        text_encoder_3=t5, tokenizer_3=t5_tokenizer(512))
    return pipe  # fp32: every model is built in fp32


def make_tiny_sd3(directory: str | Path, seed: int = 0, preset: str = "tiny") -> Path:
    """Writes the tiny random SD3 checkpoint (diffusers layout) to `directory`."""
    directory = Path(directory)
    build_pipeline(preset, seed).save_pretrained(str(directory), safe_serialization=True)
    return directory


def load_reference_pipeline(directory: str | Path):
    """diffusers' own StableDiffusion3Pipeline over the checkpoint (the fidelity reference)."""
    from diffusers import StableDiffusion3Pipeline

    return StableDiffusion3Pipeline.from_pretrained(str(directory), image_encoder=None, feature_extractor=None,
                                                    torch_dtype=torch.float32, local_files_only=True)
