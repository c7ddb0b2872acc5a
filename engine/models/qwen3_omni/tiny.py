"""A tiny random Qwen3-Omni checkpoint (thinker + talker + code2wav) in Hugging Face layout.

Written by transformers' own `Qwen3OmniMoeForConditionalGeneration` with a fixed seed
(fp32, `save_pretrained`), plus a byte-level tokenizer whose chat-template words
(<|im_start|>, user, assistant, ...) are single added tokens, as in the real model, and
the processor configuration of its audio and vision towers (tiny_omni_processor.py).

Token layout of the thinker vocabulary (TOKENS): ids 0..255 are bytes, the special
tokens follow. The talker vocabulary is `1024 + CODEBOOK`: ids below CODEBOOK are codec
codes of the first code group, the codec special ids sit at the top (CODEC), inside the
1024 ids `generate()` suppresses (all but codec EOS). Code2wav keeps the real model's
upsampling (1920 samples per frame: 12.5 frames/s at 24 kHz) with tiny widths.
"""
from __future__ import annotations

from pathlib import Path

import torch

SPECIAL = ("<|im_start|>", "<|im_end|>", "system", "user", "assistant", "<|audio_pad|>", "<|image_pad|>",
           "<|video_pad|>", "<|vision_start|>", "<|audio_start|>", "<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>",
           "<|audio_end|>", "<|vision_end|>")  # new names only ever go last: the ids above are fixed
TOKENS = {name: 256 + i for i, name in enumerate(SPECIAL)}
THINKER_VOCAB = 272
CODEBOOK = 64
NUM_CODE_GROUPS = 4
TALKER_VOCAB = 1024 + CODEBOOK
CODEC = dict(codec_pad_id=TALKER_VOCAB - 8, codec_bos_id=TALKER_VOCAB - 7, codec_eos_token_id=TALKER_VOCAB - 6,
             codec_nothink_id=TALKER_VOCAB - 5, codec_think_bos_id=TALKER_VOCAB - 4,
             codec_think_eos_id=TALKER_VOCAB - 3)
SPEAKERS = {"ethan": TALKER_VOCAB - 2, "chelsie": TALKER_VOCAB - 1}
ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3], "interleaved": True,
        "mrope_interleaved": True}  # mrope_section sums to head_dim / 2 = 8


def omni_config(talker_text: dict | None = None, **talker_overrides):
    """The Qwen3OmniMoeConfig of the tiny checkpoint; overrides go to talker_config, and
    talker_text's to the talker's decoder (its text_config)."""
    import transformers as tf

    text = dict(vocab_size=THINKER_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                rope_parameters=ROPE, initializer_range=0.05, eos_token_id=TOKENS["<|im_end|>"])
    audio = dict(d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, output_dim=64,
                 num_mel_bins=16, downsample_hidden_size=8)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  deepstack_visual_indexes=[0])
    thinker = dict(text_config=text, audio_config=audio, vision_config=vision, initializer_range=0.05,
                   user_token_id=TOKENS["user"], audio_token_id=TOKENS["<|audio_pad|>"],
                   image_token_id=TOKENS["<|image_pad|>"], video_token_id=TOKENS["<|video_pad|>"],
                   audio_start_token_id=TOKENS["<|audio_start|>"],
                   vision_start_token_id=TOKENS["<|vision_start|>"])
    talker_text = {**dict(vocab_size=TALKER_VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                          num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                          shared_expert_intermediate_size=64, rope_parameters=ROPE, initializer_range=0.05),
                   **(talker_text or {})}
    predictor = dict(vocab_size=CODEBOOK, hidden_size=48, intermediate_size=96, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_code_groups=NUM_CODE_GROUPS,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, initializer_range=0.05)
    talker = dict(text_config=talker_text, code_predictor_config=predictor, num_code_groups=NUM_CODE_GROUPS,
                  thinker_hidden_size=64, accept_hidden_layer=1, speaker_id=SPEAKERS, spatial_merge_size=2,
                  audio_token_id=TOKENS["<|audio_pad|>"], image_token_id=TOKENS["<|image_pad|>"],
                  video_token_id=TOKENS["<|video_pad|>"], vision_start_token_id=TOKENS["<|vision_start|>"],
                  audio_start_token_id=TOKENS["<|audio_start|>"], initializer_range=0.05, **CODEC,
                  **talker_overrides)
    code2wav = dict(codebook_size=CODEBOOK, hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                    intermediate_size=64, num_hidden_layers=2, sliding_window=8, num_quantizers=NUM_CODE_GROUPS,
                    decoder_dim=32, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    initializer_range=0.1)  # 0.05 gives 1e-4 peaks; 0.1 gives audio-like levels (~0.15)
    return tf.Qwen3OmniMoeConfig(
        thinker_config=thinker, talker_config=talker, code2wav_config=code2wav, enable_audio_output=True,
        im_start_token_id=TOKENS["<|im_start|>"], im_end_token_id=TOKENS["<|im_end|>"],
        tts_pad_token_id=TOKENS["<|tts_pad|>"], tts_bos_token_id=TOKENS["<|tts_bos|>"],
        tts_eos_token_id=TOKENS["<|tts_eos|>"], system_token_id=TOKENS["system"], user_token_id=TOKENS["user"],
        assistant_token_id=TOKENS["assistant"])


def _randomize_snake(model) -> None:
    """SnakeBeta starts at alpha = beta = 0 (identity-like); random values exercise it."""
    for name, param in model.named_parameters():
        if name.endswith((".alpha", ".beta")):
            param.data.uniform_(-0.5, 0.5)


def _init_talker_experts(model, seed: int) -> None:
    """transformers' _init_weights skips the talker's fused expert tensors: they would be
    saved as whatever memory torch.empty returned (seen as NaN after other tests ran)."""
    gen = torch.Generator().manual_seed(seed + 1)
    std = model.config.talker_config.text_config.initializer_range
    with torch.no_grad():
        for name, param in model.talker.named_parameters():
            if ".mlp.experts." in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


# ChatML as Qwen3-Omni's template lays out a content list: each audio part is
# <|audio_start|><|audio_pad|><|audio_end|>, each image <|vision_start|><|image_pad|><|vision_end|>,
# each video <|vision_start|><|video_pad|><|vision_end|> (one placeholder: the thinker widens it to the encoder's rows); a string content as is.
OMNI_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'audio' %}{{ '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{% elif part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'video' %}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def write_omni_tokenizer(directory: str | Path) -> None:
    from transformers import PreTrainedTokenizerFast

    from engine.checkpoints.tiny_text import write_byte_tokenizer

    write_byte_tokenizer(directory)
    tok = PreTrainedTokenizerFast.from_pretrained(str(directory))
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL)})
    assert tok.convert_tokens_to_ids(list(SPECIAL)) == list(TOKENS.values()), "special ids must follow the bytes"
    tok.chat_template = OMNI_TEMPLATE  # applied to a user turn it gives chat_prompt's ids
    tok.save_pretrained(str(directory))


def make_tiny_omni(directory: str | Path, *, seed: int = 0, with_tokenizer: bool = True,
                   **talker_overrides) -> Path:
    """Write the tiny random fp32 Qwen3-Omni checkpoint to `directory`; returns the path."""
    import transformers as tf

    from engine.models.qwen3_omni.tiny_processor import write_processor_config

    directory = Path(directory)
    torch.manual_seed(seed)
    model = tf.Qwen3OmniMoeForConditionalGeneration(omni_config(**talker_overrides)).to(torch.float32).eval()
    _randomize_snake(model)
    _init_talker_experts(model, seed)
    model.save_pretrained(str(directory), safe_serialization=True)
    write_processor_config(directory, model.config.thinker_config)
    if with_tokenizer:
        write_omni_tokenizer(directory)
    return directory


def chat_prompt(text: str | bytes) -> list[int]:
    """<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n as ids of the tiny vocabulary."""
    body = text.encode() if isinstance(text, str) else text
    nl = ord("\n")
    return ([TOKENS["<|im_start|>"], TOKENS["user"], nl, *body, TOKENS["<|im_end|>"], nl,
             TOKENS["<|im_start|>"], TOKENS["assistant"], nl])


def media_chat_prompt(text: str | bytes, audio_tokens: tuple[int, ...] = (), image_tokens: tuple[int, ...] = (),
                      video_tokens: tuple[int, ...] = ()) -> list[int]:
    """chat_prompt with the user turn opening on each clip's, image's and video's placeholder
    run, as Qwen3-Omni's processor lays them out: <|audio_start|> <|audio_pad|> x n
    <|audio_end|>, then <|vision_start|> <|image_pad|> x n <|vision_end|>, then
    <|vision_start|> <|video_pad|> x n <|vision_end|>, then the text."""
    media = []
    for n in audio_tokens:
        media += [TOKENS["<|audio_start|>"], *[TOKENS["<|audio_pad|>"]] * n, TOKENS["<|audio_end|>"]]
    for n in image_tokens:
        media += [TOKENS["<|vision_start|>"], *[TOKENS["<|image_pad|>"]] * n, TOKENS["<|vision_end|>"]]
    for n in video_tokens:
        media += [TOKENS["<|vision_start|>"], *[TOKENS["<|video_pad|>"]] * n, TOKENS["<|vision_end|>"]]
    ids = chat_prompt(text)
    return ids[:3] + media + ids[3:]
