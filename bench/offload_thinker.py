"""The secondary figures of bench.offload: the thinker's block stack and code2wav, DLO vs resident.

Thinker: a random Qwen3 checkpoint (hidden 512, 8 layers, fp32, ~140 MB of layers) built
on first use. One forward = a prefill of `tokens` tokens through the paged model; the
decode figure (one token, weight-bandwidth-bound) beside it. Code2wav: the real-size
model (random weights), its declared stacks (8 transformer layers, 4 decoder blocks).
Best of `repeats` forwards after a warm-up, resident and DLO forwards alternating.
Every key is prefixed "thinker_" or "code2wav_".
"""
from __future__ import annotations

import os
import time

CONFIG = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
              num_key_value_heads=4, head_dim=64, vocab_size=2048, max_position_embeddings=4096)


def checkpoint(root: str) -> str:
    from engine.checkpoints.tiny_text import make_tiny

    path = os.path.join(root, "qwen3-offload-bench")
    if not os.path.exists(os.path.join(path, "config.json")):
        make_tiny("qwen3", path, **CONFIG)
    return path


def _step(num_tokens: int, past: int = 0):
    """Inputs of one sequence's step: num_tokens query tokens after `past` cached ones."""
    import torch

    from engine.attention.metadata import AttentionMetadata

    total = past + num_tokens
    meta = AttentionMetadata(query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32),
                             seq_lens=torch.tensor([total], dtype=torch.int32),
                             block_tables=torch.arange(-(-total // 16), dtype=torch.int32)[None],
                             slot_mapping=torch.arange(past, total), block_size=16)
    ids = torch.randint(0, CONFIG["vocab_size"], (num_tokens,), generator=torch.Generator().manual_seed(0))
    return ids, torch.arange(past, total), meta


class Forward:
    """One model's forward over its own KV caches, timed."""

    def __init__(self, model, num_tokens: int, past: int = 0) -> None:
        import torch

        shape = (-(-(past + num_tokens) // 16), 16, model.config.num_kv_heads, model.config.head_dim)
        self.caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(model.config.num_layers)]
        self.model, self.inputs, self.times = model, _step(num_tokens, past), []

    def __call__(self) -> None:
        ids, positions, meta = self.inputs
        t0 = time.perf_counter()
        self.model(ids, positions, meta, self.caches)
        self.times.append((time.perf_counter() - t0) * 1e3)


def best_of_interleaved(a: Forward, b: Forward, repeats: int) -> tuple[float, float]:
    """Best ms of each, their forwards alternating (so load changes hit both alike)."""
    a(), b()  # warm-up
    a.times, b.times = [], []
    for _ in range(repeats):
        a(), b()
    return min(a.times), min(b.times)


def measure_thinker(root: str, tokens: int, repeats: int) -> dict:
    from engine.models.loader import load_model
    from engine.offload.config import OffloadConfig

    path = checkpoint(root)
    resident = load_model(path)
    model = load_model(path, offload=OffloadConfig(enabled=True))
    out = {"thinker_prefill_tokens": tokens}
    out["thinker_resident_ms"], out["thinker_dlo_ms"] = best_of_interleaved(
        Forward(resident, tokens), Forward(model, tokens), repeats)
    out["thinker_decode_resident_ms"], out["thinker_decode_dlo_ms"] = best_of_interleaved(
        Forward(resident, 1, past=tokens), Forward(model, 1, past=tokens), repeats * 4)
    out["thinker_dlo_over_resident"] = out["thinker_dlo_ms"] / out["thinker_resident_ms"]
    out["thinker_decode_dlo_over_resident"] = out["thinker_decode_dlo_ms"] / out["thinker_decode_resident_ms"]
    model.offload_backend.disable()
    return out


def measure_code2wav(num_frames: int, repeats: int) -> dict:
    """The real-size code2wav (transformers' default widths, random weights): its
    declared stacks (8 transformer layers, 4 decoder blocks) streamed vs resident."""
    import copy

    import torch

    from engine.models.qwen3_omni.code2wav import Code2Wav, Code2WavConfig
    from engine.offload import OffloadBackend, OffloadConfig

    torch.manual_seed(0)
    resident = Code2Wav(Code2WavConfig()).requires_grad_(False).eval()
    model = copy.deepcopy(resident)
    backend = OffloadBackend.enable(model, OffloadConfig(enabled=True))
    codes = torch.randint(0, 2048, (1, 16, num_frames), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {"resident": [], "dlo": []}
    for _ in range(repeats + 1):
        for name, m in (("resident", resident), ("dlo", model)):
            t0 = time.perf_counter()
            m(codes)
            times[name].append((time.perf_counter() - t0) * 1e3)
    backend.disable()
    best = {k: min(v[1:]) for k, v in times.items()}
    return {"code2wav_frames": num_frames, "code2wav_resident_ms": best["resident"], "code2wav_dlo_ms": best["dlo"],
            "code2wav_dlo_over_resident": best["dlo"] / best["resident"],
            "code2wav_block_bytes": backend.plan.slot_bytes}
