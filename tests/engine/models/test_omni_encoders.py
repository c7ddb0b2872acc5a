"""Our Qwen3-Omni audio and vision towers equal transformers' (fp32, atol 1e-5): on the tiny
checkpoint (loaded from its `thinker.audio_tower.` / `thinker.visual.` tensors) and on a
second, differently shaped pair of towers built here; batches give each clip/image its
solo rows."""
from __future__ import annotations

import pytest
import torch

from engine.models.qwen3_omni.audio_encoder import AudioEncoder
from engine.models.qwen3_omni.encoder_config import (AudioEncoderConfig, VisionEncoderConfig, audio_config_from_hf,
                                                     vision_config_from_hf)
from engine.models.qwen3_omni.encoder_loader import load_audio_encoder, load_vision_encoder
from engine.models.qwen3_omni.vision_encoder import VisionEncoder
from core.errors import InvalidArgument

ATOL = 1e-5
# a second shape: more layers and heads, other mel bins, a shorter attention window, two
# deepstack blocks, a 2x3-patch temporal/spatial layout and a smaller position table
OTHER_AUDIO = dict(d_model=48, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=40, output_dim=24,
                   num_mel_bins=20, downsample_hidden_size=6, n_window_infer=200)
OTHER_VISION = dict(depth=3, hidden_size=48, intermediate_size=40, num_heads=4, out_hidden_size=24, patch_size=8,
                    spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
                    deepstack_visual_indexes=[0, 2])


def _hf_towers(checkpoint):
    import transformers as tf

    model = tf.Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(str(checkpoint), dtype=torch.float32)
    return model.model.audio_tower.eval(), model.model.visual.eval()


def _clips(num_mel_bins: int, frames: list[int], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(num_mel_bins, n, generator=gen) for n in frames]


def _images(patch_dim: int, grids: list[tuple[int, int, int]], seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(sum(t * h * w for t, h, w in grids), patch_dim, generator=gen)


def _hf_audio(tower, clips) -> list[torch.Tensor]:
    features = torch.cat(clips, dim=1)
    lens = torch.tensor([c.shape[1] for c in clips])
    with torch.no_grad():
        out = tower(features, feature_lens=lens).last_hidden_state
    from engine.models.qwen3_omni.audio_encoder import output_lengths

    return list(out.split(output_lengths(lens, tower.config.n_window).tolist()))


def _hf_vision(tower, pixels, grids):
    with torch.no_grad():
        out = tower(pixels, grid_thw=torch.tensor(grids))
    sizes = [t * h * w // tower.spatial_merge_unit for t, h, w in grids]
    return list(out.pooler_output.split(sizes)), [d.split(sizes) for d in out.deepstack_features]


def _assert_audio(ours: AudioEncoder, tower, frames: list[int]) -> None:
    clips = _clips(ours.config.num_mel_bins, frames)
    mine, ref = ours(clips), _hf_audio(tower, clips)
    assert [m.shape for m in mine] == [r.shape for r in ref]
    for m, r in zip(mine, ref):
        torch.testing.assert_close(m, r, atol=ATOL, rtol=0)
    for clip, m in zip(clips, mine):  # solo == batched
        torch.testing.assert_close(ours([clip])[0], m, atol=ATOL, rtol=0)


def _assert_vision(ours: VisionEncoder, tower, grids) -> None:
    pixels = _images(ours.config.patch_dim, grids)
    out = ours(pixels, grids)
    ref_embeds, ref_deep = _hf_vision(tower, pixels, grids)
    for i, r in enumerate(ref_embeds):
        torch.testing.assert_close(out.embeds[i], r, atol=ATOL, rtol=0)
        assert len(out.deepstack[i]) == len(ref_deep)
        for layer, ref_layer in enumerate(ref_deep):
            torch.testing.assert_close(out.deepstack[i][layer], ref_layer[i], atol=ATOL, rtol=0)
    first = sum(t * h * w for t, h, w in grids[:1])
    solo = ours(pixels[:first], grids[:1])
    torch.testing.assert_close(solo.embeds[0], out.embeds[0], atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def hf_towers(tiny_omni):
    return _hf_towers(tiny_omni)


def test_audio_tower_matches_transformers(tiny_omni, hf_towers):
    # 5 s, a clip of exactly two chunks, one shorter than a chunk, one past a 104-token window
    _assert_audio(load_audio_encoder(tiny_omni), hf_towers[0], [500, 200, 37, 1234])


def test_vision_tower_matches_transformers(tiny_omni, hf_towers):
    ours = load_vision_encoder(tiny_omni)
    assert ours.config.deepstack_indexes == (0,)
    _assert_vision(ours, hf_towers[1], [(1, 14, 14), (1, 6, 10), (2, 4, 4)])  # a 224 x 224 image, a wide one, a clip


def test_differently_shaped_towers_match_transformers():
    from transformers.models.qwen3_omni_moe import configuration_qwen3_omni_moe as cfgs
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as hf

    torch.manual_seed(3)
    audio_cfg = cfgs.Qwen3OmniMoeAudioEncoderConfig(**OTHER_AUDIO, initializer_range=0.1)
    vision_cfg = cfgs.Qwen3OmniMoeVisionEncoderConfig(**OTHER_VISION, initializer_range=0.1)
    audio_tower = hf.Qwen3OmniMoeAudioEncoder(audio_cfg).eval()
    vision_tower = hf.Qwen3OmniMoeVisionEncoder(vision_cfg).eval()
    as_json = {"thinker_config": {"audio_config": audio_cfg.to_dict(), "vision_config": vision_cfg.to_dict()}}
    audio = AudioEncoder(audio_config_from_hf(as_json)).eval()
    audio.load_state_dict(audio_tower.state_dict())
    vision = VisionEncoder(vision_config_from_hf(as_json)).eval()
    vision.load_state_dict(vision_tower.state_dict())
    assert vision.config.deepstack_indexes == (0, 2)
    _assert_audio(audio, audio_tower, [333, 250, 40])  # window 200 frames = 26 tokens
    _assert_vision(vision, vision_tower, [(1, 8, 12), (1, 4, 4)])


def test_bad_shapes_name_the_field():
    with pytest.raises(InvalidArgument, match="num_heads"):
        AudioEncoderConfig(16, 30, 1, 4, 8, 8, 4, 100, 50, 800)
    with pytest.raises(InvalidArgument, match="n_window_infer"):
        AudioEncoderConfig(16, 32, 1, 4, 8, 8, 4, 100, 50, 150)
    with pytest.raises(InvalidArgument, match="deepstack_indexes"):
        VisionEncoderConfig(1, 32, 8, 2, 8, 16, 2, 2, 3, 64, 1e4, deepstack_indexes=(1,))
    with pytest.raises(InvalidArgument, match="num_position_embeddings"):
        VisionEncoderConfig(1, 32, 8, 2, 8, 16, 2, 2, 3, 60, 1e4)
