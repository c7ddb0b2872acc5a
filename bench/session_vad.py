"""The cost of a session's server VAD (conductor/session_vad.py: silero-vad on the
conductor's CPU), as a person runs it:

    python -m bench.session_vad --json bench-results/session_vad.json [--quick]

Feeds speech-like audio and silence at 24 kHz in 100 ms appends (as a client streams
it) and reports CPU seconds per audio second (`vad_cpu_per_audio_s`, a real-time
factor: 0.01 is 1 % of a core per session) and `vad_cpu_ms_per_append`, medians over
rounds. Nothing here is asserted."""
from __future__ import annotations

import argparse
import statistics
import time

from bench.output import print_table, write_json


def _audio(seconds: float) -> bytes:
    from bench.speech_like import pcm16, silence, vowels

    return (silence(1.0) + pcm16(vowels(seconds))) * 2


def measure(seconds: float, rounds: int) -> dict:
    from core.session_events import TurnDetection
    from conductor.session_vad import SpeechDetector

    audio, chunk = _audio(seconds), 24000 * 2 // 10
    model = SpeechDetector(TurnDetection(), 24000).model
    per_s, per_append = [], []
    for _ in range(rounds):
        vad = SpeechDetector(TurnDetection(), 24000, model)
        model.reset_states()
        t0, n = time.process_time(), 0
        for i in range(0, len(audio), chunk):
            vad.feed(audio[i:i + chunk])
            n += 1
        cpu = time.process_time() - t0
        per_s.append(cpu / (len(audio) / 2 / 24000))
        per_append.append(1000 * cpu / n)
    return {"vad_cpu_per_audio_s": statistics.median(per_s), "vad_cpu_ms_per_append": statistics.median(per_append)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="one short round: takes every path, means nothing")
    args = p.parse_args()
    results = measure(0.5, 1) if args.quick else measure(4.0, 5)
    print_table([("VAD CPU per audio second", "vad_cpu_per_audio_s", "s/s"),
                 ("VAD CPU per 100 ms append", "vad_cpu_ms_per_append", "ms")], results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
