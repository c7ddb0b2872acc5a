"""Chaos at the front door: what one request costs everyone else.

    python -m bench.chaos_front_door --json PATH [--quick]
    measure_front_door() -> {"expensive_request_victims_failed": 0, "unauth_flood_rss_growth_mb": 31.0, ...}

On a real deployment (bench.fuzz_mesh: a `starmesh conductor` process with an API key,
thinker, talker+codec and SD3 service processes, tiny checkpoints):

- expensive requests beside live ones: 6 speech and 2 image requests are started and
  each has streamed its first event; then, at once, a 20 MB `text` to the speech model
  and to the image model (refused by their size, before anything tokenizes them), a
  text at the conductor's max_text_bytes (tokenized off the event loop, then refused
  for its ids) and an image prompt just under its byte bound (served). Keys:
  expensive_request_victims_failed (live requests that did not finish OK; goal 0) and
  expensive_request_outcomes (each expensive request's status);
- an unauthenticated flood: `flood` requests of 20 MB `text` without the token,
  `concurrency` at a time. Key: unauth_flood_rss_growth_mb, the conductor's peak resident
  memory over the flood minus its resident memory before it (goal <= 100), and
  unauth_flood_statuses.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc

from bench.fuzz_mesh import FuzzMesh, rss_mb, tiny_checkpoints
from bench.output import write_json

KEY = "chaos-front-door"
SPEECH, IMAGE, TEXT = "qwen3-omni", "sd3", "text"
SPEECH_PARAMS = {"max_new_tokens": 12, "max_frames": 60, "min_frames": 60}
IMAGE_PARAMS = {"steps": 8, "guidance": 5.0, "width": 64, "height": 64, "seed": 7}
HUGE_TEXT_BYTES = 20 << 20
CALL_TIMEOUT_S = 300.0  # only a hung call reaches it
OPTIONS = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
QUICK = {"num_speech": 2, "num_image": 1, "flood": 12}


def _metadata(key: str) -> tuple:
    return (("authorization", f"Bearer {key}"),) if key else ()


def speech_request():
    from engine.models.qwen3_omni.tiny import chat_prompt
    from protos.starmesh.v1 import conductor_pb2 as pb

    req = pb.GenerateRequest(model=SPEECH, input_ids=chat_prompt("hi"))
    req.params.update(SPEECH_PARAMS)
    return req


def image_request(prompt: str = "a red fox in the snow"):
    from protos.starmesh.v1 import conductor_pb2 as pb

    req = pb.GenerateRequest(model=IMAGE, text=prompt)
    req.params.update(IMAGE_PARAMS)
    return req


def expensive_requests() -> dict:
    """name -> a request that costs the conductor or a service far more than a live one."""
    from conductor.input_limits import InputLimits
    from engine.models.sd3.params import MAX_PROMPT_BYTES
    from protos.starmesh.v1 import conductor_pb2 as pb

    huge = _words(HUGE_TEXT_BYTES)
    text = pb.GenerateRequest(model=TEXT, text=_words(InputLimits().max_text_bytes))
    text.params.update({"max_new_tokens": 2})
    return {"speech_20mb_text": pb.GenerateRequest(model=SPEECH, text=huge),
            "image_20mb_text": pb.GenerateRequest(model=IMAGE, text=huge),
            "text_at_max_text_bytes": text,
            "image_prompt_at_its_limit": image_request(_words(MAX_PROMPT_BYTES - 1))}


def _words(nbytes: int) -> str:
    """ASCII words, exactly `nbytes` long."""
    return ("hello world " * (nbytes // 12 + 1))[:nbytes]


async def generate(channel, req, key: str = KEY, first: asyncio.Event | None = None) -> tuple[str, str]:
    """(status name, details) of one Generate call run to its end; `first` is set at its
    first event (or at its end)."""
    from protos.starmesh.v1 import conductor_pb2_grpc

    try:
        call = conductor_pb2_grpc.ConductorStub(channel).Generate(req, metadata=_metadata(key),
                                                                  timeout=CALL_TIMEOUT_S)
        async for _ in call:
            if first is not None:
                first.set()
        return "OK", ""
    except grpc.aio.AioRpcError as e:
        return e.code().name, e.details() or ""
    finally:
        if first is not None:
            first.set()


@dataclass
class ExpensiveRound:
    live: list[tuple[str, str]] = field(default_factory=list)       # (status, details) per live request
    expensive: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def victims(self) -> list[tuple[str, str]]:
        return [o for o in self.live if o[0] != "OK"]


async def expensive_round(address: str, num_speech: int = 6, num_image: int = 2) -> ExpensiveRound:
    """The live requests, each in flight (its first event seen), then every expensive
    request at once; all awaited."""
    live = [speech_request()] * num_speech + [image_request()] * num_image
    out = ExpensiveRound()
    async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
        started = [asyncio.Event() for _ in live]
        tasks = [asyncio.create_task(generate(channel, req, first=e)) for req, e in zip(live, started)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), CALL_TIMEOUT_S)
        expensive = expensive_requests()
        done = await asyncio.gather(*(generate(channel, req) for req in expensive.values()))
        out.expensive = dict(zip(expensive, done))
        out.live = list(await asyncio.gather(*tasks))
    return out


class PeakRss:
    """A process's peak resident memory from now on: the kernel's high-water mark, reset
    here (/proc/PID/clear_refs), and, where that cannot be reset, sampled."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sampled = rss_mb(pid)
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
            self.kernel = True
        except OSError:
            self.kernel = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.sampled = max(self.sampled, rss_mb(self.pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        peak = self.sampled
        if self.kernel:
            with open(f"/proc/{self.pid}/status") as f:
                peak = max(peak, next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:")))
        return peak


def unauth_flood(address: str, pid: int, num: int = 60, concurrency: int = 12,
                 nbytes: int = HUGE_TEXT_BYTES) -> dict:
    """`num` Generate calls of a `nbytes` text without a token, `concurrency` at a time, sent
    as one serialized message (the client's own memory stays one copy)."""
    from protos.starmesh.v1 import conductor_pb2 as pb

    body = pb.GenerateRequest(model=SPEECH, text="x" * nbytes).SerializeToString()
    statuses: collections.Counter = collections.Counter()
    baseline = rss_mb(pid)
    peak = PeakRss(pid)

    def one(_i: int) -> None:
        with grpc.insecure_channel(address, options=OPTIONS) as channel:
            call = channel.unary_stream("/starmesh.v1.Conductor/Generate")(body, timeout=CALL_TIMEOUT_S)
            try:
                for _ in call:
                    pass
                statuses["OK"] += 1
            except grpc.RpcError as e:
                statuses[e.code().name] += 1

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(num)))
    top = peak.stop()
    return {"unauth_flood_rss_growth_mb": round(top - baseline, 1), "unauth_flood_rss_baseline_mb": round(baseline, 1),
            "unauth_flood_statuses": dict(statuses), "unauth_flood_requests": num}


def measure_front_door(num_speech: int = 6, num_image: int = 2, flood: int = 60, log=lambda line: None) -> dict:
    t0 = time.perf_counter()
    with FuzzMesh(tiny_checkpoints(), log=log, api_key=KEY) as mesh:
        conductor_pid = mesh.pids()["conductor"]
        result = asyncio.run(expensive_round(mesh.conductor, num_speech, num_image))
        flooded = unauth_flood(mesh.conductor, conductor_pid, flood)
        alive = all(mesh.alive().values())
    return {
        "expensive_request_victims_failed": len(result.victims),
        "expensive_request_live": len(result.live),
        "expensive_request_victims": [_shown(o) for o in result.victims[:10]],
        "expensive_request_outcomes": {name: _shown(o) for name, o in result.expensive.items()},
        **flooded,
        "front_door_processes_alive": alive,
        "front_door_s": round(time.perf_counter() - t0, 1),
    }


def _shown(outcome: tuple[str, str]) -> str:
    status, details = outcome
    return f"{status}: {details[:200]}" if details else status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos_front_door", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--quick", action="store_true", help="smoke run: 3 live requests, a flood of 12")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = measure_front_door(**(QUICK if args.quick else {}), log=print)
    for key, value in result.items():
        print(f"{key:36s} {value}")
    write_json(args.json, result)
    return 0 if result["expensive_request_victims_failed"] == 0 and result["unauth_flood_rss_growth_mb"] <= 100 else 1


if __name__ == "__main__":
    raise SystemExit(main())
