"""The SNAC decoder (our torch, our safetensors loading) equals the `snac` package's
decode: noise disabled, and with the same per-window noise; a window decodes the same
batched or alone; released-style weights convert once to safetensors."""
from __future__ import annotations

import json

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.orpheus.windows import snac_levels
from engine.models.snac.config import SnacConfig
from engine.models.snac.convert import convert_snac
from engine.models.snac.model import SnacDecoder
from tests.fixtures.tiny_orpheus import CONFIGS, noiseless, snac_dir, snac_reference

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def config(request):
    return request.param


@pytest.fixture(scope="module")
def ours(config):
    return SnacDecoder.from_checkpoint(snac_dir(config))


def windows(n: int, frames: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 4096, (n, 7 * frames), generator=torch.Generator().manual_seed(seed))


def test_the_tiny_snac_has_the_24khz_strides_and_hop(config):
    cfg = SnacConfig.from_dir(snac_dir(config))
    assert cfg.hop_length == 512 and cfg.vq_strides == (4, 2, 1) and cfg.sampling_rate == 24000


@torch.no_grad()
def test_without_noise_equals_the_package(config, ours):
    w = windows(3)
    levels = snac_levels(w)
    with noiseless(snac_reference(config)):
        want = snac_reference(config).decode(levels)[:, 0]
    got = ours.decode(levels, None)
    assert got.shape == (3, 4 * 2048)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@torch.no_grad()
def test_with_noise_equals_the_package_seeded_per_window(config, ours):
    w = windows(4, seed=1)
    seeds = [3, 99, 12345, 2**40 + 7]
    got = ours.decode(snac_levels(w), seeds)  # one batch, one generator per window
    ref = snac_reference(config)  # built (its init draws from the RNG) before any seed is set
    for i, seed in enumerate(seeds):
        torch.manual_seed(seed)
        want = ref.decode([x[i:i + 1] for x in snac_levels(w)])[0, 0]
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=0)
    assert not torch.allclose(got[0], ours.decode(snac_levels(w[:1]), None)[0], atol=1e-6)  # noise is on


@torch.no_grad()
@pytest.mark.parametrize("n", [5, 16])  # 16: the codec service's batch limit, where NNPACK would take over
def test_a_window_decodes_the_same_batched_or_alone(ours, n):
    w = windows(n, seed=2)
    seeds = list(range(1, n + 1))
    batched = ours.decode(snac_levels(w), seeds)
    pair = ours.decode(snac_levels(w[3:5]), seeds[3:5])
    for i in range(n):  # bit for bit: the engine's batching must not change a request's audio
        assert torch.equal(batched[i], ours.decode(snac_levels(w[i:i + 1]), [i + 1])[0]), i
    assert torch.equal(pair, batched[3:5])


def test_released_weights_convert_once_to_safetensors(tmp_path):
    """A pytorch_model.bin with the older weight_g / weight_v names (and the encoder) loads
    after `convert`, equal to the package reading the same file."""
    from snac import SNAC

    cfg = SnacConfig(encoder_dim=2, decoder_dim=32)
    torch.manual_seed(0)
    ref = SNAC(**cfg.as_json()).eval()
    state = {}
    for k, v in ref.state_dict().items():
        state[k.replace(".parametrizations.weight.original0", ".weight_g")
                .replace(".parametrizations.weight.original1", ".weight_v")] = v
    src = tmp_path / "src"
    src.mkdir()
    torch.save(state, src / "pytorch_model.bin")
    (src / "config.json").write_text(json.dumps(cfg.as_json()))
    dst = convert_snac(src, tmp_path / "dst")
    assert sorted(p.name for p in dst.iterdir()) == ["config.json", "model.safetensors"]
    levels = snac_levels(windows(1))
    with torch.no_grad(), noiseless(ref):
        want = ref.decode(levels)[:, 0]
    torch.testing.assert_close(SnacDecoder.from_checkpoint(str(dst)).decode(levels, None), want, atol=1e-5, rtol=0)


def test_bad_checkpoints_are_clear_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"attn_window_size": 32}))
    with pytest.raises(InvalidArgument, match="attn_window_size"):
        SnacDecoder.from_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"decoder_rates": [8, 8, 4]}))
    with pytest.raises(InvalidArgument, match="decoder_rates"):
        SnacDecoder.from_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({}))
    with pytest.raises(InvalidArgument, match="convert"):
        SnacDecoder.from_checkpoint(str(tmp_path))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(InvalidArgument, match="weights-only"):
        convert_snac(tmp_path, tmp_path / "out")
