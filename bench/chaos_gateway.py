"""The HTTP gateway under bad input and body floods: its statuses and its memory.

    python -m bench.chaos_gateway --json bench-results/chaos_gateway.json [--quick]
    figures = measure_gateway_bad_input()       # what bench.chaos reports

A deployment of Qwen3-Omni (speech and chat) and SD3 (images) on the tiny checkpoints,
with its conductor and gateway, started as `starmesh up` starts them (cluster.launcher).

Keys (flat):
- gateway_5xx_on_bad_input: 5xx answers over the battery of bench.gateway_bad_inputs
  (every numeric field of every route with NaN, infinities, wrong types, values out of
  range; malformed bodies); goal 0. gateway_bad_inputs: its size;
  gateway_bad_input_accepted: 2xx answers to it (goal 0); gateway_bad_input_unnamed:
  400s to a field's bad value whose error does not name the field (goal 0);
  gateway_bad_input_unanswered: connections that broke without an answer (goal 0).
- gateway_chunked_flood_rss_growth_mb: the gateway's peak RSS (VmHWM, reset before)
  minus its RSS before, over one 300 MB chunked upload (no Content-Length);
  gateway_chunked_flood_status: its answer (413).
- gateway_concurrent_flood_rss_growth_mb: the same (from the RSS before the first flood)
  over 10 bodies of 30 MB sent at once,
  half with Content-Length, half chunked; gateway_concurrent_flood_5xx (goal 0) and
  gateway_concurrent_flood_refused (429s and 413s) count their answers.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench.output import print_table, write_json

MIB = 1 << 20
QUICK = {"chunked_mb": 64, "concurrent": 4, "concurrent_mb": 30}


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """A process's resident set (VmRSS) or its peak since the last reset_peak (VmHWM), MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


def reset_peak(pid: int) -> None:
    """Sets the process's VmHWM to its current RSS (Linux clear_refs "5")."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_growth_mb(pid: int, flood, baseline_mb: float | None = None) -> tuple[float, object]:
    """(the process's peak RSS during flood() minus baseline_mb (default: its RSS before),
    flood's result). A baseline taken before earlier floods counts what they left held."""
    before = rss_mb(pid) if baseline_mb is None else baseline_mb
    reset_peak(pid)
    result = flood()
    return rss_mb(pid, "VmHWM") - before, result


def raw_post(address: str, path: str, body, length: int | None, headers: dict[str, str] = {},
             timeout_s: float = 120.0) -> int | None:
    """POST `body` (an iterable of byte chunks) on a fresh socket; Content-Length `length`,
    or chunked framing when None. Sends until done or the server stops reading (a
    refusal closes the connection), then reads the status; None when the connection
    ended without one."""
    host, _, port = address.rpartition(":")
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        try:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n{head}"
                      f"{framing}\r\n\r\n".encode())
            for chunk in body:
                s.sendall(chunk if length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if length is None:
                s.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered early and closed: its answer is read below
        try:
            line = s.makefile("rb").readline()
        except OSError:
            return None
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _pieces(data: bytes, size: int = MIB):
    view = memoryview(data)
    return (view[i:i + size] for i in range(0, len(data), size))


def chunked_flood(address: str, total_mb: int = 300) -> int | None:
    """One chunked upload of total_mb MiB of JSON-ish bytes; the gateway's status."""
    chunk = b"x" * MIB
    return raw_post(address, "/v1/chat/completions", (chunk for _ in range(total_mb)), None)


def concurrent_flood(address: str, body: bytes, n: int, headers: dict[str, str] = {}) -> list[int | None]:
    """n copies of `body` at once, even ones with Content-Length, odd ones chunked; statuses."""
    go = threading.Barrier(n)

    def one(i: int):
        go.wait()
        return raw_post(address, "/v1/audio/speech", _pieces(body), len(body) if i % 2 == 0 else None, headers)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def flood_body(model: str, size_mb: int) -> bytes:
    """A valid speech body of size_mb MiB but for its voice, which no model has: the
    gateway reads and parses all of it, then refuses it itself (400 naming voice)."""
    return json.dumps({"model": model, "input": "a" * (size_mb * MIB - 200), "voice": "nobody",
                       "response_format": "pcm"}).encode()


def send_battery(url: str, battery, key: str = "") -> dict:
    """Each bad input once; counts of its answers (module docstring keys)."""
    import httpx

    fivexx, accepted, unnamed, unanswered, failures = 0, 0, 0, 0, []
    auth = {"authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(timeout=120) as client:
        for bad in battery:
            try:
                r = client.post(url + bad.path, content=bad.body, headers={"content-type": bad.content_type, **auth})
            except httpx.TransportError as e:  # the connection broke: no answer at all
                unanswered += 1
                failures.append(f"{bad.what}: no answer ({type(e).__name__}: {e})")
                continue
            param = _param(r)
            fivexx += r.status_code >= 500
            accepted += r.status_code < 400
            unnamed += bad.param is not None and r.status_code == 400 and param != bad.param
            if r.status_code >= 500 or r.status_code < 400 or (bad.param is not None and param != bad.param):
                failures.append(f"{bad.what}: {r.status_code} {r.text[:300]}")
    return {"gateway_5xx_on_bad_input": fivexx, "gateway_bad_inputs": len(battery),
            "gateway_bad_input_accepted": accepted, "gateway_bad_input_unnamed": unnamed,
            "gateway_bad_input_unanswered": unanswered,
            "gateway_bad_input_failures": failures[:20]}


def _param(response):
    try:
        return response.json()["error"]["param"]
    except (ValueError, KeyError, TypeError):
        return None


def measure_floods(address: str, pid: int, speech_model: str, chunked_mb: int = 300, concurrent: int = 10,
                   concurrent_mb: int = 30, key: str = "") -> dict:
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    baseline = rss_mb(pid)  # both floods from it: memory the first keeps is not a free start for the second
    chunked_growth, chunked_status = peak_growth_mb(pid, lambda: chunked_flood(address, chunked_mb), baseline)
    body = flood_body(speech_model, concurrent_mb)
    growth, statuses = peak_growth_mb(pid, lambda: concurrent_flood(address, body, concurrent, auth), baseline)
    return {"gateway_chunked_flood_rss_growth_mb": chunked_growth, "gateway_chunked_flood_status": chunked_status,
            "gateway_concurrent_flood_rss_growth_mb": growth,
            "gateway_concurrent_flood_5xx": sum(1 for s in statuses if s is not None and s >= 500),
            "gateway_concurrent_flood_unanswered": statuses.count(None),
            "gateway_concurrent_flood_refused": sum(1 for s in statuses if s in (413, 429)),
            "gateway_concurrent_flood_statuses": statuses, "chunked_mb": chunked_mb,
            "concurrent": concurrent, "concurrent_mb": concurrent_mb}


def deployment() -> dict:
    """Qwen3-Omni (thinker, talker, codec) and SD3 on the tiny checkpoints, and a gateway."""
    svc = lambda component, ckpt: {"component": component, "checkpoint": ckpt, "replicas": ["x"]}  # noqa: E731
    sd3_nodes = ("clip_l", "clip_g", "t5", "join_text", "init_latent", "denoise_cond", "denoise_uncond", "combine",
                 "decode")
    return {"name": "bench-chaos-gateway", "gateway": {"address": "x"},
            "checkpoints": {"omni": {"tiny": "qwen3-omni"}, "sd3": {"tiny": "sd3"}},
            "services": {"thinker": svc("thinker", "omni"), "talker": svc("talker+codec", "omni"),
                         "sd3": svc("sd3", "sd3")},
            "models": {"qwen3-omni": {"pipeline": "qwen3-omni",
                                      "options": {"chunk_size": 8, "left_context": 4, "first_chunk": 4},
                                      "placement": {"prefill": "thinker", "decode": "thinker", "talker": "talker",
                                                    "code2wav": "talker"},
                                      "kv_contexts": {"thinker": ["prefill", "decode"]}},
                       "sd3": {"pipeline": "sd3", "placement": {n: "sd3" for n in sd3_nodes}}}}


def measure_gateway_bad_input(chunked_mb: int = 300, concurrent: int = 10, concurrent_mb: int = 30,
                              log=print) -> dict:
    """Starts the deployment, sends the battery and the floods, stops it (module docstring)."""
    import asyncio

    from bench.gateway_bad_inputs import battery
    from client.connection import Connection
    from client.session import ConductorSession
    from cluster.launchable import read_launchable
    from cluster.launcher import Cluster
    from cluster.shipped_deployments import with_free_ports, write_deployment

    async def cards(address: str):
        async with ConductorSession(Connection(address)) as session:
            return await session.models()

    path = write_deployment(with_free_ports(deployment()))
    with Cluster(read_launchable(path), path, log=lambda line: None) as cluster:
        url, pid = cluster.endpoints()["gateway"], cluster.gateway.pid
        bad = battery(asyncio.run(cards(cluster.conductor_address)), "qwen3-omni", "qwen3-omni", "sd3")
        t0 = time.perf_counter()
        results = send_battery(url, bad)
        log(f"battery: {len(bad)} bad inputs in {time.perf_counter() - t0:.1f} s, "
            f"{results['gateway_5xx_on_bad_input']} answered 5xx")
        results.update(measure_floods(url.removeprefix("http://"), pid, "qwen3-omni", chunked_mb, concurrent,
                                      concurrent_mb))
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos_gateway", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--chunked-mb", type=int, default=300, help="size of the chunked upload")
    p.add_argument("--concurrent", type=int, default=10, help="bodies sent at once")
    p.add_argument("--concurrent-mb", type=int, default=30, help="size of each of them")
    p.add_argument("--quick", action="store_true", help="smoke run: a 64 MiB chunked upload, 4 bodies of 30 MiB")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sizes = QUICK if args.quick else {"chunked_mb": args.chunked_mb, "concurrent": args.concurrent,
                                      "concurrent_mb": args.concurrent_mb}
    results = measure_gateway_bad_input(**sizes)
    print_table([("5xx on bad input", "gateway_5xx_on_bad_input", ""), ("bad inputs", "gateway_bad_inputs", ""),
                 ("bad inputs accepted", "gateway_bad_input_accepted", ""),
                 ("chunked flood RSS growth", "gateway_chunked_flood_rss_growth_mb", "MiB"),
                 ("concurrent flood RSS growth", "gateway_concurrent_flood_rss_growth_mb", "MiB"),
                 ("concurrent flood 5xx", "gateway_concurrent_flood_5xx", "")], results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
