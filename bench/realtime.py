"""Realtime sessions through the mesh: a spoken conversation kept in the thinker's KV
cache, over the gateway's /v1/realtime with the official openai SDK, against the same
conversation re-sent whole each turn, and against the conductor's gRPC Session stream.

    python -m bench.realtime --json bench-results/realtime.json [--quick]

`starmesh up` with the default deployment's Qwen3-Omni (thinker, talker, codec and
encoder processes, the conductor and the gateway, on free ports) over a checkpoint that
is the tiny one with a thinker of hidden 1024 (bench/realtime_checkpoint.py says why).
Every turn is a spoken clip (speech-like audio, bench/speech_like.py) answered in audio,
greedy, with a fixed number of text tokens and codec frames. Keys (flat):
- ttfa_turn10_over_turn1: a 10-turn conversation over the WebSocket (turn detection
  off: each clip committed, then answered), time to first audio of turn 10 over turn 1
  (goal <= 1.2); baseline_ttfa_turn10_over_turn1 the same conversation with the whole
  history (every clip, every answer's transcript) re-sent each turn through streamed
  /v1/chat/completions; turn-1 and turn-10 TTFAs (ms) of both beside them; medians over
  rounds, the two modes alternating;
- barge_in_stop_ms_p50: server VAD on, a client speaking over the answer in real time
  (bench/realtime_barge_in.py): the interrupting speech's first sample to the cancelled
  response's last audio delta (goal <= 150); barge_in_detected_ms_p50 to speech_started,
  barge_in_done_ms_p50 to the cancelled response.done;
- sessions_c8_viability: 8 sessions at once, each a turn every PERIOD_S; a turn is
  viable when its audio, played in real time from its first delta, never runs dry; the
  fraction viable (goal 1.0);
- added_ttfa_ms_p50: the same turn over the WebSocket (SDK) and over gRPC
  (client.conversation), in two sessions holding the same conversation, alternating;
  the median of paired differences (goal <= 10).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from bench.output import print_table, write_json
from bench.realtime_clients import chat_turn, clip, grpc_turn, recv_until, sdk, session_update, ws_turn

MODEL = "qwen3-omni"
PERIOD_S = 3.0
FULL = dict(rounds=5, turns=10, clip_s=3.0, tokens=16, frames=16, barge_rounds=5, sessions=8, session_turns=4,
            session_frames=24, added_rounds=20)
QUICK = dict(rounds=1, turns=2, clip_s=0.5, tokens=4, frames=4, barge_rounds=1, sessions=2, session_turns=1,
             session_frames=4, added_rounds=2)
LONG = {"max_output_tokens": 8, "max_frames": 2000, "min_frames": 2000}   # 160 s of audio: still speaking when cut


def ws_params(tokens: int, frames: int) -> dict:
    return {"max_output_tokens": tokens, "max_frames": frames, "min_frames": frames}


async def _connect(url: str, params: dict, stack):
    """An SDK realtime connection configured with params (turn detection off)."""
    conn = await stack.enter_async_context(sdk(url).realtime.connect(model=MODEL))
    await conn.session.update(session=session_update(params))
    await recv_until(conn, "session.updated")
    return conn


async def conversation_turns(url: str, sizes: dict, kept: bool, round_: int) -> list:
    """Each turn as heard (bench.realtime_clients.Heard): kept in the mesh (WebSocket) or
    re-sent whole (chat completions). Each mode has clips of its own: with the same clips,
    the second conversation's turn 1 repeated the first's request and found it warm (a
    turn 1 of 80 ms against 130-157), which its turn 10 cannot."""
    import contextlib

    import httpx

    params = ws_params(sizes["tokens"], sizes["frames"])
    clips = [clip(sizes["clip_s"], seed=100 * round_ + 50 * (not kept) + k) for k in range(sizes["turns"])]
    async with contextlib.AsyncExitStack() as stack:
        if kept:
            conn = await _connect(url, params, stack)
            return [await ws_turn(conn, pcm) for pcm in clips]
        http, history = await stack.enter_async_context(httpx.AsyncClient(timeout=300)), []
        return [await chat_turn(http, url, MODEL, history, pcm, params) for pcm in clips]


async def turns_figures(url: str, sizes: dict) -> dict:
    samples: dict[str, list[float]] = {}
    for r in range(sizes["rounds"]):
        for kept in ((True, False) if r % 2 == 0 else (False, True)):
            turns = await conversation_turns(url, sizes, kept, r)
            ttfas, key = [t.ttfa_s for t in turns], "" if kept else "baseline_"
            for name, value in ((f"{key}ttfa_turn10_over_turn1", ttfas[-1] / ttfas[0]),
                                (f"{key}ttfa_turn1_ms", 1e3 * ttfas[0]), (f"{key}ttfa_turn10_ms", 1e3 * ttfas[-1]),
                                (f"{key}turn10_prompt_tokens", turns[-1].prompt_tokens),
                                (f"{key}turn10_cached_tokens", turns[-1].cached_tokens)):
                samples.setdefault(name, []).append(value)
            mode = "kept" if kept else "re-sent"
            print(f"round {r + 1} {mode}: ttfa ms " + " ".join(f"{1e3 * t:.0f}" for t in ttfas), flush=True)
    return {k: statistics.median(v) for k, v in samples.items()}


async def session_turns(url: str, sizes: dict, index: int) -> list[int]:
    """One of the concurrent sessions: a turn every PERIOD_S (its start staggered); each
    turn's playback stalls."""
    import contextlib

    async with contextlib.AsyncExitStack() as stack:
        conn = await _connect(url, ws_params(sizes["tokens"], sizes["session_frames"]), stack)
        await asyncio.sleep(index * PERIOD_S / sizes["sessions"])
        due, stalls = time.perf_counter(), []
        for k in range(sizes["session_turns"]):
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            stalls.append((await ws_turn(conn, clip(1.0, seed=10 * index + k))).playback.stalls)
            due += PERIOD_S
        return stalls


async def viability(url: str, sizes: dict) -> dict:
    per_session = await asyncio.gather(*(session_turns(url, sizes, i) for i in range(sizes["sessions"])))
    stalls = [s for session in per_session for s in session]
    return {"sessions_c8_viability": sum(s == 0 for s in stalls) / len(stalls),
            "sessions_c8_stalls": sum(stalls), "sessions_c8_turns": len(stalls)}


async def added_ttfa(url: str, conductor: str, sizes: dict) -> dict:
    """WebSocket minus gRPC time to first audio of the same turns, in two sessions that
    hold the same conversation, the order alternating."""
    import contextlib

    from client.session import ConductorSession

    tokens, frames = sizes["tokens"], sizes["frames"]
    grpc_params = {"max_new_tokens": tokens, "max_frames": frames, "min_frames": frames}
    async with contextlib.AsyncExitStack() as stack:
        conn = await _connect(url, ws_params(tokens, frames), stack)
        session = await stack.enter_async_context(ConductorSession(conductor))
        conv = await stack.enter_async_context(session.conversation(MODEL, ("audio",), voice="ethan",
                                                                    input_sample_rate=24000, params=grpc_params))
        diffs = []
        for i in range(sizes["added_rounds"]):
            pcm = clip(0.5, seed=1000 + i)
            if i % 2:
                g = await grpc_turn(conv, pcm)
            w = (await ws_turn(conn, pcm)).ttfa_s
            if not i % 2:
                g = await grpc_turn(conv, pcm)
            diffs.append(1e3 * (w - g))
    return {"added_ttfa_ms_p50": statistics.median(diffs), "added_ttfa_ms_rounds": diffs}


async def measure_async(url: str, conductor: str, sizes: dict) -> dict:
    from bench.realtime_barge_in import barge_in_ms

    warm = {**sizes, "turns": 1}   # first requests load what loads lazily
    await conversation_turns(url, warm, True, sizes["rounds"])
    await conversation_turns(url, warm, False, sizes["rounds"])
    out = await turns_figures(url, sizes)
    rounds = [await barge_in_ms(url, MODEL, LONG) for _ in range(sizes["barge_rounds"])]
    for name in ("stop", "detected", "done"):
        values = [r[name] for r in rounds]
        print(f"barge-in {name} ms: " + " ".join(f"{v:.0f}" for v in values), flush=True)
        out.update({f"barge_in_{name}_ms_p50": statistics.median(values), f"barge_in_{name}_ms_rounds": values})
    out.update(await viability(url, sizes))
    out.update(await added_ttfa(url, conductor, sizes))
    return {**out, **{f"size_{k}": v for k, v in sizes.items()}}


def measure(sizes: dict) -> dict:
    from bench.realtime_checkpoint import checkpoint
    from bench.up_process import UpProcess
    from cluster.shipped_deployments import rewrite_shipped

    root = os.environ.get("STARMESH_BENCH_CACHE", os.path.join(tempfile.gettempdir(), "starmesh-bench"))
    with tempfile.TemporaryDirectory(prefix="starmesh-realtime-") as tmp:
        path = rewrite_shipped("local", {"omni": checkpoint(root)}, models=(MODEL,), directory=tmp)
        up = UpProcess(path).start()
        try:
            return asyncio.run(measure_async(up.gateway, up.conductor, sizes))
        finally:
            up.stop()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 turns, 1 round each, 2 sessions; means nothing")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = measure(QUICK if args.quick else FULL)
    print_table([("ttfa turn 10 / turn 1", "ttfa_turn10_over_turn1", "x (goal <= 1.2)"),
                 ("  re-sent history", "baseline_ttfa_turn10_over_turn1", "x"),
                 ("  turn 1 / turn 10", "ttfa_turn1_ms", "ms"), ("", "ttfa_turn10_ms", "ms"),
                 ("  re-sent turn 1 / turn 10", "baseline_ttfa_turn1_ms", "ms"), ("", "baseline_ttfa_turn10_ms", "ms"),
                 ("barge-in stop p50", "barge_in_stop_ms_p50", "ms (goal <= 150)"),
                 ("  speech_started p50", "barge_in_detected_ms_p50", "ms"),
                 ("  response.done p50", "barge_in_done_ms_p50", "ms"),
                 ("8 sessions viability", "sessions_c8_viability", "(goal 1.0)"),
                 ("added ttfa p50 (ws - grpc)", "added_ttfa_ms_p50", "ms (goal <= 10)")], results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
