"""transformers' Qwen3-Omni generate(return_audio=True) with the codes it decodes captured."""
from __future__ import annotations

import time

import torch

from engine.models.qwen3_omni.tiny import TOKENS


class OmniReference:
    def __init__(self, checkpoint) -> None:
        import transformers as tf

        self.model = tf.Qwen3OmniMoeForConditionalGeneration.from_pretrained(
            str(checkpoint), dtype=torch.float32).eval()
        # transformers' talker rope reads audio_config for a prompt with audio and images, which
        # its talker config lacks (AttributeError): give it the thinker's, the one the audio rows came from.
        self.model.talker.config.audio_config = self.model.config.thinker_config.audio_config
        self.seconds = 0.0

    def generate(self, prompt: list[int], max_text: int, max_frames: int, stop_ids=(), **media) -> dict:
        """Greedy thinker and talker (HF mirrors do_sample onto the code predictor); the
        talker keeps HF's repetition penalty 1.05 and suppressed ids (mirrored on our side).
        media: the processor's audio/image inputs (input_features, feature_attention_mask, ...)."""
        captured = {}
        decode = self.model.code2wav.chunked_decode

        def capture(codes, **kwargs):
            captured["codes"] = codes.clone()  # [1, G, F]
            return decode(codes, **kwargs)

        self.model.code2wav.chunked_decode = capture
        ids = torch.tensor([prompt])
        t0 = time.perf_counter()
        try:
            seq, wav = self.model.generate(
                input_ids=ids, return_audio=True, speaker="ethan", thinker_max_new_tokens=max_text,
                thinker_eos_token_id=[TOKENS["<|im_end|>"], *stop_ids], thinker_do_sample=False,
                talker_do_sample=False, talker_max_new_tokens=max_frames, **media)
        finally:
            del self.model.code2wav.chunked_decode
        self.seconds += time.perf_counter() - t0
        return {"text_ids": seq[0, ids.shape[1]:].tolist(), "codes": captured["codes"][0].T,  # [F, G]
                "audio": wav.reshape(-1)}
