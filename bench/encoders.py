"""Omni input benchmark: spoken and seen questions through the mesh (thinker, talker,
codec and one encoder service holding both towers), tiny random Qwen3-Omni.

    python -m bench.encoders --json bench-results/encoders.json [--checkpoint DIR] [--quick]

Shapes pinned: 5 s audio clips (WAV, 16 kHz), 224 x 224 images (PNG), answers of 16 text
tokens and exactly 40 codec frames (codec EOS suppressed: min_frames = max_frames), greedy.
Chunking C = 25, L = 25, first window 4 frames (compose/deployments/local.yaml).

Keys:
- batched_over_single_audio / _image: wall time of 8 requests one after another over the
  wall time of the same 8 sent at once (the encoder, thinker and talker batch them);
  batched_over_single = the smaller of the two.
- ttfa_ms (starmesh, a spoken question, median of 3) and hf_ttfa_ms (transformers'
  generate(return_audio=True): its first audio is its whole answer); ttfa_ratio = hf / ours.
Targets: batched_over_single >= 3; ttfa_ratio >= 5. Speed is reported, never asserted in tests.
--quick: the same parts at their smallest (QUICK: 2 requests of 1 s clips, 8 frames, one
timed run each), a check that the benchmark runs; key `shapes` says which ran.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import io
import statistics
import time

import numpy as np

from bench.output import write_json
from bench.speech import checkpoint
from bench.speech_mesh import CHUNK, FIRST, LEFT

SERVICES = ("thinker", "talker", "codec", "encoder")


@dataclasses.dataclass(frozen=True)
class Shapes:
    requests: int = 8       # per batched_over_single wave
    text_tokens: int = 16
    frames: int = 40
    clip_s: float = 5.0
    repeats: int = 3        # timed first-audio runs (transformers: one more, a warm-up)

    @property
    def params(self) -> dict:
        return {"max_new_tokens": self.text_tokens, "max_frames": self.frames, "min_frames": self.frames}


QUICK = Shapes(requests=2, text_tokens=4, frames=8, clip_s=1.0, repeats=1)


def clip(seconds: float = 5.0, seed: int = 0) -> bytes:
    import wave

    t = np.arange(int(seconds * 16000)) / 16000
    pcm = (0.3 * np.sin(2 * np.pi * (200 + 20 * seed) * t) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def image(seed: int = 0) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


class MediaMesh:
    """The four services as child processes and a conductor serving `omni` over them."""

    def __init__(self, ckpt: str) -> None:
        import dataclasses

        from conductor.service import ConductorService
        from pipelines.qwen3_omni.model import speech_model, speech_placement
        from runtime.background import BackgroundServer
        from runtime.process import ServiceProcess

        args = ["--checkpoint", ckpt, "--torch-threads", "1", "--log-level", "WARNING"]
        self.procs = [ServiceProcess(n, args, name=f"bench-{n}", start_timeout_s=180) for n in SERVICES]
        try:
            for proc in self.procs:  # in parallel: each child imports torch on its own
                proc.launch()
            for proc in self.procs:
                proc.wait_serving()
            a = [p.address for p in self.procs]
            model = speech_model("omni", speech_placement([a[0]], [a[1]], [a[2]], [a[3]]), CHUNK, LEFT, FIRST)
            self.conductor = BackgroundServer(ConductorService([dataclasses.replace(model, tokenizer_dir=ckpt)]))
            self.conductor.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if getattr(self, "conductor", None) is not None:
            self.conductor.stop()
        for proc in self.procs:
            proc.stop()


async def _ask(address: str, media: dict, params: dict):
    from client.speech import speak

    return await speak(address, "omni", None, params, text="What is it?", **media)


def batched_over_single(address: str, kind: str, make, shapes: Shapes) -> float:
    media = [{kind: make(seed=i)} for i in range(shapes.requests)]
    asyncio.run(_ask(address, media[0], shapes.params))  # warm-up
    t0 = time.perf_counter()
    for m in media:
        asyncio.run(_ask(address, m, shapes.params))
    single = time.perf_counter() - t0

    async def wave():
        return await asyncio.gather(*(_ask(address, m, shapes.params) for m in media))

    t0 = time.perf_counter()
    asyncio.run(wave())
    return single / (time.perf_counter() - t0)


def hf_ttfa_ms(ckpt: str, wav: bytes, shapes: Shapes) -> float:
    """transformers answers in one piece: its time to first audio is the whole generate call."""
    import torch
    import transformers as tf

    from engine.models.qwen3_omni.tiny import TOKENS, media_chat_prompt
    from engine.models.qwen3_omni.encoder_loader import load_audio_encoder
    from engine.models.qwen3_omni.media_features import MediaFeatures

    mel = MediaFeatures.from_checkpoint(ckpt).audio(wav, "audio")
    ids = media_chat_prompt("What is it?", (load_audio_encoder(ckpt)([mel])[0].shape[0],))
    model = tf.Qwen3OmniMoeForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    times = []
    with torch.inference_mode():
        for _ in range(shapes.repeats + 1):  # the first warms up
            t0 = time.perf_counter()
            model.generate(input_ids=torch.tensor([ids]), input_features=mel[None],
                           feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long), return_audio=True,
                           speaker="ethan", thinker_max_new_tokens=shapes.text_tokens, thinker_do_sample=False,
                           thinker_eos_token_id=[TOKENS["<|im_end|>"]], talker_do_sample=False,
                           talker_max_new_tokens=shapes.frames + 1, talker_min_new_tokens=shapes.frames + 1)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times[1:])


def main(argv=None) -> dict:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--checkpoint", help="a Qwen3-Omni checkpoint with towers (default: the tiny one)")
    p.add_argument("--quick", action="store_true", help="smoke run: the QUICK shapes (figures not to read)")
    args = p.parse_args(argv)
    shapes = QUICK if args.quick else Shapes()
    torch.set_num_threads(1)
    ckpt = checkpoint(args, "starmesh-bench-omni-media", "preprocessor_config.json")  # a tiny one with towers
    wav = functools.partial(clip, shapes.clip_s)
    mesh = MediaMesh(ckpt)
    try:
        address = mesh.conductor.address
        results = {"batched_over_single_audio": batched_over_single(address, "audio", wav, shapes),
                   "batched_over_single_image": batched_over_single(address, "image", image, shapes)}
        ttfa = [asyncio.run(_ask(address, {"audio": wav()}, shapes.params)).ttfa_ms for _ in range(shapes.repeats)]
    finally:
        mesh.stop()
    results["batched_over_single"] = min(results["batched_over_single_audio"], results["batched_over_single_image"])
    results["ttfa_ms"] = statistics.median(ttfa)
    results["hf_ttfa_ms"] = hf_ttfa_ms(ckpt, wav(), shapes)
    results["shapes"] = dataclasses.asdict(shapes)
    results["ttfa_ratio"] = results["hf_ttfa_ms"] / results["ttfa_ms"]
    write_json(args.json, results)
    print(results)
    return results


if __name__ == "__main__":
    main()
