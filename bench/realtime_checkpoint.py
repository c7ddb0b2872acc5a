"""The Qwen3-Omni checkpoint bench.realtime talks to: the tiny one with a wider thinker.

At the tiny checkpoint's thinker width (hidden 64) a prompt costs next to nothing, so a
conversation re-sent whole each turn costs no more than its last turn alone and the
baseline measures nothing. At hidden 1024 a 600-token prefill costs well over a turn's
fixed cost here (as bench/prefix.py's text checkpoint).

The experts are sized so attention over a kept conversation weighs what it weighs in the
real model. Qwen3-Omni-30B-A3B's thinker computes ~3B weights per token (~62M per layer
of 48) and, per layer, 32 heads x 128 for each token of context for Q.K and again for
P.V (~8K multiply-adds per context token): at a 1,000-token conversation attention adds
~13 % to a new token's cost. Here, per layer: the attention projections (2.6M) and two
experts of 3 x 1024 x 2048 (12.6M), against 16 heads x 64 x 2 = 2K per context token:
~13 % at 1,000 tokens too (with 768-wide experts it would be ~26 %, twice the real
model's share, and a continued conversation would look worse than it is).

The audio tower, talker and codec keep the tiny widths (the audio tower only widens its
output to the thinker's rows): a turn's time to first audio is then the thinker's
prefill over what is new, plus the same talker and codec steps in both modes.
"""
from __future__ import annotations

import os

THINKER = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=16,
               num_key_value_heads=4, head_dim=64, moe_intermediate_size=2048, max_position_embeddings=4096)
ROPE_SECTION = [8, 12, 12]   # mrope sections sum to head_dim / 2 = 32


def wide_omni_config():
    """omni_config() with THINKER's widths (the rows every part hands the thinker widened to match)."""
    from engine.models.qwen3_omni.tiny import omni_config

    config = omni_config()
    text = config.thinker_config.text_config
    for key, value in THINKER.items():
        setattr(text, key, value)
    text.rope_parameters = {**text.rope_parameters, "mrope_section": ROPE_SECTION}
    hidden = THINKER["hidden_size"]
    config.thinker_config.audio_config.output_dim = hidden
    config.thinker_config.vision_config.out_hidden_size = hidden
    config.talker_config.thinker_hidden_size = hidden
    return config


def checkpoint(root: str) -> str:
    """The wide checkpoint's directory under root (built once, then reused)."""
    path = os.path.join(root, "qwen3-omni-realtime-bench-h1024-e2048")
    if not os.path.exists(os.path.join(path, "config.json")):
        _write(path)
    return path


def _write(path: str) -> None:
    import torch
    import transformers as tf

    from engine.models.qwen3_omni import tiny
    from engine.models.qwen3_omni.tiny_processor import write_processor_config

    torch.manual_seed(0)
    model = tf.Qwen3OmniMoeForConditionalGeneration(wide_omni_config()).to(torch.float32).eval()
    tiny._randomize_snake(model)
    tiny._init_talker_experts(model, 0)
    tmp = f"{path}.partial"
    model.save_pretrained(tmp, safe_serialization=True)
    write_processor_config(tmp, model.config.thinker_config)
    tiny.write_omni_tokenizer(tmp)
    os.replace(tmp, path)
