"""Load generator of the speech policy comparison (bench.speech_policies): a separate
process, as a user's players are, so the bench's process runs only the conductors (in
it, the clients' channel set-up and audio decoding took the conductor's GIL, most of all
in a burst, when 16 clients start at once).

    python -m bench.speech_client

Reads one JSON command per stdin line, {"address", "prompts", "params", "delays",
"modalities", "tag"}: request i (id `tag-i`; no tag: the conductor names it) sends
prompts[i % len(prompts)] (chat-formatted ids) delays[i] seconds after the phase starts,
on a channel of its own. Answers one JSON line, {"wall_s", "sent_s" (wall clock at the
start), "results"}: per request {"refused": true} (RESOURCE_EXHAUSTED) or
{"refused": false, "ttfa_ms", "continuous", "underrun_s", "audio_s"}, measured on this
process's clock as a player would (bench.speech_mesh.viability, stalls_s).

`SpeechClient` is the bench side: it starts this process and runs one phase per call.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

from bench.pipe_child import PipeChild


async def one(address: str, ids: list[int], params: dict, delay_s: float, modalities: tuple[str, ...],
              request_id: str = "") -> dict:
    import grpc

    from bench.speech_mesh import stalls_s, viability
    from client.speech import speak

    await asyncio.sleep(delay_s)
    try:
        s = await speak(address, "omni", ids, params, timeout_s=600, modalities=modalities, request_id=request_id)
    except grpc.aio.AioRpcError as e:
        if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return {"refused": True}
        raise
    counts = viability(s.chunk_times_s, [int(c.numel()) for c in s.chunks])
    return {"refused": False, "ttfa_ms": s.ttfa_ms, "continuous": counts[0] == counts[1],
            "underrun_s": sum(stalls_s(s).values()), "audio_s": s.audio_s}


async def run_phase(cmd: dict) -> dict:
    prompts, modalities, tag = cmd["prompts"], tuple(cmd["modalities"]), cmd.get("tag", "")
    sent_s, t0 = time.time(), time.perf_counter()
    results = await asyncio.gather(*(one(cmd["address"], prompts[i % len(prompts)], cmd["params"], d, modalities,
                                         f"{tag}-{i}" if tag else "") for i, d in enumerate(cmd["delays"])))
    return {"wall_s": time.perf_counter() - t0, "sent_s": sent_s, "results": list(results)}


def serve() -> None:
    import torch

    torch.set_num_threads(1)  # as every process of the mesh
    print(json.dumps({"ready": True}), flush=True)
    while True:
        line = sys.stdin.readline()
        if not line.strip():
            return
        print(json.dumps(asyncio.run(run_phase(json.loads(line)))), flush=True)


# ---- the bench side ------------------------------------------------------------


class SpeechClient:
    def __init__(self) -> None:
        self.child = PipeChild("bench.speech_client", what="the speech client process")

    @property
    def pid(self) -> int:
        return self.child.pid

    def phase(self, address: str, prompts: list, params: dict, delays: list[float],
              modalities: tuple[str, ...], tag: str = "") -> dict:
        """{"wall_s", "sent_s", "results"} of one phase (see the module's docstring); tag:
        request i is `tag-i` (empty: the conductor names them)."""
        cmd = {"address": address, "prompts": [list(p) for p in prompts], "params": params, "delays": delays,
               "modalities": list(modalities), "tag": tag}
        return self.child.ask(cmd, "a phase")

    def close(self) -> None:
        self.child.close()

    def __enter__(self) -> "SpeechClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    serve()
