"""The gateway bounds what it reads whatever the framing: a chunked body over the limit
is refused with 413 as it streams in (the gateway's memory stays flat: measured as its
peak RSS, VmHWM, over the upload); bodies in flight across connections are capped (429
with Retry-After, then served again once they leave); a body that stops arriving is
408; a client that leaves mid-body or mid-answer leaves nothing running; none of it is
ever a 5xx."""
from __future__ import annotations

import re
import select
import socket

import httpx
import pytest

from bench.chaos_gateway import chunked_flood, concurrent_flood, flood_body, peak_growth_mb
from tests.fixtures.services import describe, wait_until
from tests.gateway.gateway_mesh import KEY, LONG

pytestmark = pytest.mark.timeout(600)
MIB = 1 << 20
AUTH = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}


def _address(mesh) -> str:
    return mesh.url.removeprefix("http://")


def _metric(mesh, name: str, **labels) -> float:
    """A sample of the gateway's /metrics (0 when absent)."""
    text = httpx.get(f"{mesh.url}/metrics", timeout=30).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = "^" + re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _server_errors(mesh) -> float:
    text = httpx.get(f"{mesh.url}/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r'starmesh_gateway_requests_total\{[^}]*status="5\d\d"\} (\S+)', text))


def test_a_300_mb_chunked_body_is_413_and_costs_the_gateway_little(mesh):
    growth, status = peak_growth_mb(mesh.gateway_pid, lambda: chunked_flood(_address(mesh), 300))
    assert status == 413
    # the body is refused once it passes max_body_bytes (32 MiB): the peak holds that
    # much (and its parts), never the 300 MB sent
    assert growth < 200, f"the gateway grew {growth:.0f} MB over a 300 MB chunked upload"


def test_ten_concurrent_30_mb_bodies_are_capped_and_never_5xx(mesh):
    errors_before = _server_errors(mesh)
    body = flood_body("omni", 30)
    auth = {"Authorization": f"Bearer {KEY}"}
    growth, statuses = peak_growth_mb(mesh.gateway_pid, lambda: concurrent_flood(_address(mesh), body, 10, auth))
    # read whole and refused by the route (voice), or refused by the cap on bodies in flight
    assert set(statuses) <= {400, 413, 429} and 429 in statuses, statuses
    # at most 64 MiB of bodies held, each as bytes, a copy while its chunks are joined and
    # its parsed text: about 3x the cap (before the cap: every body read at once)
    assert growth < 400, f"the gateway grew {growth:.0f} MB over 10 x 30 MB bodies"
    assert _server_errors(mesh) == errors_before
    assert wait_until(lambda: _metric(mesh, "starmesh_gateway_body_bytes_in_flight") == 0, 60)


def _open_body(mesh, declared: int, sent: int) -> socket.socket:
    """A connection whose request declares `declared` body bytes and sends only `sent`."""
    s = socket.create_connection(("127.0.0.1", int(_address(mesh).rpartition(":")[2])), timeout=60)
    s.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {declared}\r\n\r\n".encode() + b" " * sent)
    return s


def test_the_cap_on_bodies_in_flight_is_429_with_retry_after_and_frees_when_clients_leave(mesh):
    held = [_open_body(mesh, 30 * MIB, 30 * MIB - 1) for _ in range(2)]  # 60 MiB of the 64 MiB cap, held
    try:
        assert wait_until(lambda: _metric(mesh, "starmesh_gateway_body_bytes_in_flight") == 2 * (30 * MIB - 1), 60)
        r = httpx.post(f"{mesh.url}/v1/audio/speech", content=flood_body("omni", 8), headers=AUTH, timeout=60)
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["code"] == "bodies_in_flight"
    finally:
        for s in held:
            s.close()  # the clients leave mid-body: nothing runs for them, their share comes back
    assert wait_until(lambda: _metric(mesh, "starmesh_gateway_body_bytes_in_flight") == 0, 60)
    r = httpx.post(f"{mesh.url}/v1/audio/speech", content=flood_body("omni", 8), headers=AUTH, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
    assert _metric(mesh, "starmesh_gateway_requests_total", route="/v1/audio/speech", status="499") >= 2


def test_a_body_that_stops_arriving_is_408_and_gives_its_share_back(mesh):
    from runtime.process import ServiceProcess

    args = ["--conductor", mesh.conductor, "--body-timeout-s", "1"]
    with ServiceProcess("", args, name="gateway-1s", command="gateway") as gateway:
        s = socket.create_connection(("127.0.0.1", gateway.port), timeout=60)
        with s:
            s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n" + b"{" * 10)  # then nothing more
            answer = s.makefile("rb").read()  # until the gateway closes the connection
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"body_timeout"' in answer
        metrics = httpx.get(f"http://127.0.0.1:{gateway.port}/metrics", timeout=30).text
        assert re.search(r"^starmesh_gateway_body_bytes_in_flight 0\.0$", metrics, re.MULTILINE)


def test_a_client_leaving_a_whole_answer_cancels_it_everywhere_and_is_no_5xx(mesh):
    """A non-streamed chat with audio (a 160 s answer, sent whole at its end): the client
    leaves once the mesh runs it; the gateway cancels it, counts a 499, no 5xx."""
    errors_before = _server_errors(mesh)
    gone_before = _metric(mesh, "starmesh_gateway_requests_total", route="/v1/chat/completions", status="499")
    body = httpx.Request("POST", "/", json={
        "model": "omni", "messages": [{"role": "user", "content": "Hello there"}], "modalities": ["text", "audio"],
        "audio": {"voice": "ethan", "format": "wav"}, **{k: v for k, v in LONG.items() if k != "max_new_tokens"},
        "max_tokens": LONG["max_new_tokens"]}).read()
    s = socket.create_connection(("127.0.0.1", int(_address(mesh).rpartition(":")[2])), timeout=60)
    try:
        s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        running = lambda: any(describe(p.address).num_open_requests for p in mesh.procs)  # noqa: E731
        answered = lambda: select.select([s], [], [], 0)[0]  # noqa: E731  (it failed before running)
        assert wait_until(lambda: running() or answered(), 60) and not answered(), s.recv(2000)
    finally:
        s.close()
    assert wait_until(lambda: all(describe(p.address).num_open_requests == 0 for p in mesh.procs), 60)
    assert wait_until(lambda: _metric(mesh, "starmesh_gateway_requests_total", route="/v1/chat/completions",
                                      status="499") > gone_before, 60)
    assert _server_errors(mesh) == errors_before
