"""Code2Wav against transformers' Qwen3OmniMoeCode2Wav on the tiny Qwen3-Omni checkpoint:
one-shot decoding, chunked decoding, and streamed windows (decode_window)."""
from __future__ import annotations

import json

import pytest
import torch

from engine.models.qwen3_omni.code2wav import Code2Wav, Code2WavConfig, chunk_windows
from core.errors import InvalidArgument

pytestmark = pytest.mark.timeout(240)

CODEBOOK, NUM_GROUPS = 64, 4


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """As in a service process: on a loaded 2-core machine two intra-op threads make these
    many small convolutions ~30x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from engine.models.qwen3_omni.tiny import make_tiny_omni

    return make_tiny_omni(tmp_path_factory.mktemp("omni"), with_tokenizer=False)


@pytest.fixture(scope="module")
def reference(checkpoint):
    import transformers as tf

    model = tf.Qwen3OmniMoeForConditionalGeneration.from_pretrained(str(checkpoint), dtype=torch.float32)
    return model.code2wav.eval()


@pytest.fixture(scope="module")
def model(checkpoint):
    return Code2Wav.from_checkpoint(checkpoint)


def random_codes(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CODEBOOK, shape, generator=torch.Generator().manual_seed(seed))


def assert_close(got: torch.Tensor, want: torch.Tensor, atol: float) -> None:
    """allclose at atol, and relative to the signal too (the tiny model's audio is small)."""
    assert got.shape == want.shape
    diff = (got - want).abs().max().item()
    assert diff <= atol, diff
    assert diff <= 1e-3 * want.abs().max().item() + 1e-9, (diff, want.abs().max().item())


def test_config_and_samples_per_frame(model):
    assert model.samples_per_frame == 1920
    assert model.config.num_quantizers == NUM_GROUPS and model.config.codebook_size == CODEBOOK
    assert model.config.head_dim == 16 and model.config.sliding_window == 8


@torch.no_grad()
@pytest.mark.parametrize("num_frames", [1, 9, 30])
def test_forward_matches_transformers(model, reference, num_frames):
    codes = random_codes(2, NUM_GROUPS, num_frames, seed=num_frames)  # [B, Q, T]
    want = reference(codes)  # [B, 1, S]
    got = model(codes)
    assert got.dtype == torch.float32
    assert_close(got, want, atol=1e-5)
    assert got.abs().max() > 0  # the comparison is not between zeros
    other = codes.clone()
    other[0, 0, 0] = (other[0, 0, 0] + 1) % CODEBOOK
    assert not torch.equal(model(other)[0], got[0])  # the codes matter


@torch.no_grad()
def test_chunked_decode_matches_transformers(model, reference):
    codes = random_codes(1, NUM_GROUPS, 320, seed=1)  # two chunks: 300 frames, then 25 context + 20
    want = reference.chunked_decode(codes, chunk_size=300, left_context_size=25)
    assert_close(model.chunked_decode(codes, chunk_size=300, left_context_size=25), want, atol=1e-4)


def test_chunk_windows_follow_the_reference_rule():
    # start - left > 0 takes `left` context frames; otherwise every earlier frame
    assert chunk_windows(12, chunk_size=4, left_context_size=4) == [(0, 0, 4), (4, 4, 8), (8, 4, 12)]
    assert chunk_windows(30, 10, 25) == [(0, 0, 10), (10, 10, 20), (20, 20, 30)]
    assert chunk_windows(40, 30, 25) == [(0, 0, 30), (30, 25, 40)]
    assert chunk_windows(0, 4, 25) == []


@torch.no_grad()
def test_streamed_windows_equal_reference_windows(model, reference, record_property):
    """C=4, L=25 over 42 frames: each decode_window equals the reference on the same
    window with the same trimming; then a report against one-shot decoding."""
    num_frames, spf = 42, model.samples_per_frame
    codes = random_codes(NUM_GROUPS, num_frames, seed=2)  # [Q, T]
    oneshot = model(codes[None])[0, 0]  # [S]
    pieces, report = [], []
    for start, context, end in chunk_windows(num_frames, chunk_size=4, left_context_size=25):
        window = codes[:, start - context:end]  # [Q, T_w]
        got = model.decode_window(window.T.contiguous(), context)  # [S_w]
        want = reference(window[None])[0, 0, context * spf:]
        assert got.shape == want.shape
        assert_close(got, want, atol=1e-5)
        pieces.append(got)
        aligned = oneshot[start * spf:start * spf + got.numel()]  # one-shot samples of the same frames
        report.append({"frames": [start, end], "context": context, "samples": got.numel(),
                       "missing_at_end": (end - start) * spf - got.numel(),
                       "max_diff_first_frame": (got[:spf] - aligned[:spf]).abs().max().item(),
                       "max_diff": (got - aligned).abs().max().item()})
    streamed = torch.cat(pieces)
    summary = {"oneshot_samples": oneshot.numel(), "streamed_samples": streamed.numel(),
               "signal_max": oneshot.abs().max().item(), "chunks": report}
    record_property("chunk_boundaries", json.dumps(summary))
    print_report(summary)


def print_report(summary: dict) -> None:
    print(f"\ncode2wav streamed (C=4, L=25) vs one-shot: {summary['streamed_samples']} vs "
          f"{summary['oneshot_samples']} samples, signal max {summary['signal_max']:.3g}")
    for row in summary["chunks"]:
        print(f"  frames {row['frames']} context {row['context']:2d}: {row['samples']} samples "
              f"({row['missing_at_end']} missing at the end), max diff first frame "
              f"{row['max_diff_first_frame']:.2e}, whole chunk {row['max_diff']:.2e}")


def test_decode_windows_batch_equals_solo(model):
    codes = torch.stack([random_codes(7, NUM_GROUPS, seed=s) for s in range(3)])  # [B, T, Q]
    batched = model.decode_windows(codes, [0, 3, 6])
    for b, n in enumerate([0, 3, 6]):
        solo = model.decode_window(codes[b], n)
        assert batched[b].shape == solo.shape == ((7 - n) * 1920 - 555,)
        assert torch.equal(batched[b], solo)  # bit-exact: batching never changes a window's audio


@pytest.mark.parametrize("frames, batch", [(1, 4), (2, 4), (3, 4), (5, 4), (3, 16), (7, 16)])
def test_windows_batched_equal_solo_bit_for_bit(model, frames, batch):
    """Short windows (the transformer's matmuls over few rows) and batches of 16 (where
    NNPACK would take over the convolutions) included."""
    codes = torch.stack([random_codes(frames, NUM_GROUPS, seed=s) for s in range(batch)])  # [B, T, Q]
    batched = model.decode_windows(codes, [0] * batch)
    for b in range(batch):
        assert torch.equal(batched[b], model.decode_window(codes[b], 0)), (frames, b)


def test_bfloat16_load(checkpoint, model):
    half = Code2Wav.from_checkpoint(checkpoint, dtype="bfloat16")
    assert next(half.parameters()).dtype == torch.bfloat16
    codes = random_codes(1, NUM_GROUPS, 5, seed=3)
    assert half(codes).shape == model(codes).shape


def test_bad_config_and_checkpoint_errors_name_the_field(tmp_path, checkpoint):
    with pytest.raises(InvalidArgument, match="num_key_value_heads"):
        Code2WavConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(InvalidArgument, match="upsample_rates"):
        Code2WavConfig(upsample_rates=())
    with pytest.raises(InvalidArgument, match="hidden_act"):
        Code2WavConfig(hidden_act="gelu")
    with pytest.raises(InvalidArgument, match="rope_type"):
        Code2WavConfig.from_hf({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0}})
    with pytest.raises(InvalidArgument, match="dtype"):
        Code2Wav.from_checkpoint(checkpoint, dtype="int8")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.raises(InvalidArgument, match="code2wav_config"):
        Code2Wav.from_checkpoint(tmp_path)


def test_forward_rejects_the_wrong_number_of_code_groups(model):
    with pytest.raises(InvalidArgument, match="codes must be"):
        model(torch.zeros(1, NUM_GROUPS - 1, 2, dtype=torch.long))
