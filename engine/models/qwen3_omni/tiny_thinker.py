"""A tiny random Qwen3-Omni checkpoint whose thinker text model is what the engine tests
load (the composite's text part, `THINKER_PART`), with the smallest audio and vision
towers transformers accepts and no talker.

    make_tiny(thinker_model, directory, num_hidden_layers=1)   # engine.checkpoints.tiny_text

`thinker_model(overrides)` takes the text model's config fields, as make_tiny's families do.
"""
from __future__ import annotations

from engine.checkpoints.tiny_text import BASE, MOE

OMNI_ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3], "interleaved": True,
             "mrope_interleaved": True}


def thinker_config(overrides: dict):
    """A Qwen3OmniMoeConfig whose thinker text model has BASE + MOE + `overrides` (its
    tie_word_embeddings on thinker_config, where transformers reads it)."""
    import transformers as tf

    overrides = dict(overrides)
    tie = overrides.pop("tie_word_embeddings", False)
    text = {**BASE, **MOE, "rope_parameters": OMNI_ROPE, **overrides}
    text.pop("tie_word_embeddings")
    audio = dict(d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, output_dim=64,
                 num_mel_bins=16, downsample_hidden_size=8)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  deepstack_visual_indexes=[0])
    thinker = dict(text_config=text, audio_config=audio, vision_config=vision, tie_word_embeddings=tie,
                   initializer_range=text["initializer_range"])
    return tf.Qwen3OmniMoeConfig(thinker_config=thinker, enable_audio_output=False)


def thinker_model(overrides: dict):
    import transformers as tf

    return tf.Qwen3OmniMoeForConditionalGeneration(thinker_config(overrides))
