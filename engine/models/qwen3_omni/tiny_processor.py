"""The processor configuration a Qwen3-Omni checkpoint ships for its audio and vision towers.

One `preprocessor_config.json`, as the real checkpoint has it: the Whisper-style log-mel
feature extractor (16 kHz, 25 ms windows, 10 ms hop, `feature_size` = the audio tower's
`num_mel_bins`) and the Qwen2-VL image processor (patches of `patch_size`, merged
`merge_size` x `merge_size` into one thinker token, `temporal_patch_size` frames per
patch, resized into [min_pixels, max_pixels]). Both transformers classes read their own
keys from the same file. Beside it `video_preprocessor_config.json`, the video
processor's: frames sampled at FPS, MIN_FRAMES..MAX_FRAMES of them, each resized into
[VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS].
"""
from __future__ import annotations

import json
from pathlib import Path

FILE = "preprocessor_config.json"
VIDEO_FILE = "video_preprocessor_config.json"
FPS = 1.0           # 2 frames (one temporal patch) per 2 s: rope time steps of 2 s, unlike an image's 1 s
MIN_FRAMES, MAX_FRAMES = 2, 16
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 32 * 32, 96 * 96  # at most 9 thinker tokens per temporal patch
MAX_AUDIO_SECONDS = 30  # the tiny model's longest clip (the real one takes 300 s)
MIN_PIXELS = 32 * 32
MAX_PIXELS = 448 * 448  # bounds a tiny image to 196 thinker tokens


def processor_config(audio_config, vision_config) -> dict:
    """The preprocessor_config.json dict for towers of these transformers configs."""
    merge = vision_config.spatial_merge_size
    return {
        "processor_class": "Qwen3OmniMoeProcessor",
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": audio_config.num_mel_bins, "sampling_rate": 16000, "hop_length": 160, "n_fft": 400,
        "chunk_length": MAX_AUDIO_SECONDS, "n_samples": MAX_AUDIO_SECONDS * 16000,
        "nb_max_frames": MAX_AUDIO_SECONDS * 100, "padding_side": "right", "padding_value": 0.0,
        "return_attention_mask": True, "dither": 0.0,
        "image_processor_type": "Qwen2VLImageProcessor",
        "patch_size": vision_config.patch_size, "temporal_patch_size": vision_config.temporal_patch_size,
        "merge_size": merge, "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True, "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "resample": 3,
    }


def video_processor_config(vision_config) -> dict:
    """The video_preprocessor_config.json dict (transformers' Qwen2VLVideoProcessor keys)."""
    return {
        "video_processor_type": "Qwen2VLVideoProcessor", "do_sample_frames": True, "fps": FPS,
        "min_frames": MIN_FRAMES, "max_frames": MAX_FRAMES, "patch_size": vision_config.patch_size,
        "temporal_patch_size": vision_config.temporal_patch_size, "merge_size": vision_config.spatial_merge_size,
        "size": {"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True, "do_resize": True,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "resample": 3,
    }


def write_processor_config(directory: str | Path, thinker_config) -> Path:
    """Writes FILE and VIDEO_FILE for a Qwen3OmniMoeThinkerConfig's towers into `directory`;
    returns FILE's path."""
    path = Path(directory) / FILE
    config = processor_config(thinker_config.audio_config, thinker_config.vision_config)
    path.write_text(json.dumps(config, indent=2) + "\n")
    video = video_processor_config(thinker_config.vision_config)
    (Path(directory) / VIDEO_FILE).write_text(json.dumps(video, indent=2) + "\n")
    return path
