"""A small local trace store: an OTLP/gRPC receiver (opentelemetry-proto's TraceService)
that keeps the spans of recent traces in memory, and a JSON query endpoint over HTTP.

    store = TraceStore(); store.start()          # OTLP on store.otlp_address
    GET http://<store.http_address>/v1/requests/<request id>  -> {"trace_ids", "spans"}

Bounded, whoever sends spans (any local process can): the oldest traces are dropped
past `max_traces` or `max_spans` spans in all; a trace keeps at most
`max_spans_per_trace` spans and a request id at most `max_traces_per_request` traces
(later ones are counted in `num_dropped`, not kept); span names and string attributes
are cut to `MAX_TEXT` characters, and a span keeps at most `MAX_ATTRIBUTES`
attributes (arrays, kvlists and bytes: cluster/otlp_value.py). So memory and the size of one query's answer are bounded. `starmesh up` runs one and
points every process at it (STARMESH_TRACE_STORE); `starmesh trace` reads it over HTTP
(fetch_request).
"""
from __future__ import annotations

import errno
import json
import threading
import time
import urllib.parse
import urllib.request
from collections import OrderedDict
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from cluster.otlp_value import attribute_value
from runtime.decode_guard import SyncDecodeGuard

REQUEST_ATTR = "starmesh.request_id"
MAX_TEXT = 1024
MAX_ATTRIBUTES = 64


def _value(v):
    return attribute_value(v, MAX_TEXT)


def span_dicts(request: trace_service_pb2.ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in request.resource_spans:
        service = next((_value(a.value) for a in rs.resource.attributes if a.key == "service.name"), "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({"trace_id": s.trace_id.hex()[:32], "span_id": s.span_id.hex()[:16],
                            "parent_id": s.parent_span_id.hex()[:16], "name": s.name[:MAX_TEXT],
                            "service": service, "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                            "attributes": {a.key[:MAX_TEXT]: _value(a.value)
                                           for a in s.attributes[:MAX_ATTRIBUTES]}})
    return out


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: "TraceStore") -> None:
        self.store = store

    def Export(self, request, context):
        self.store.add(span_dicts(request))
        return trace_service_pb2.ExportTraceServiceResponse()


class TraceStore:
    def __init__(self, host: str = "127.0.0.1", otlp_port: int = 0, http_port: int = 0,
                 max_traces: int = 2000, max_spans: int = 100_000, max_spans_per_trace: int = 2000,
                 max_traces_per_request: int = 16) -> None:
        self.host, self.max_traces, self.max_spans = host, max_traces, max_spans
        self.max_spans_per_trace, self.max_traces_per_request = max_spans_per_trace, max_traces_per_request
        self.num_spans = 0
        self.num_dropped = 0  # spans refused by the per-trace or per-request bound
        self._traces: OrderedDict[str, list[dict]] = OrderedDict()
        self._by_request: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        # no SO_REUSEPORT: a port in use is an error, not a second store sharing it
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)],
                                 interceptors=[SyncDecodeGuard()])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Receiver(self), self._grpc)
        try:
            self.otlp_port = self._grpc.add_insecure_port(f"{host}:{otlp_port}")
            self._http = ThreadingHTTPServer((host, http_port), _handler(self))
        except (RuntimeError, OSError) as e:
            raise OSError(errno.EADDRINUSE, f"trace store: could not bind {host}:{otlp_port} (OTLP) or "
                                            f"{host}:{http_port} (query): {e}") from e
        self.http_port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True, name="trace-store-http")

    @property
    def otlp_address(self) -> str:
        return f"{self.host}:{self.otlp_port}"

    @property
    def http_address(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def start(self) -> "TraceStore":
        self._grpc.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=1).wait()

    def add(self, spans: list[dict]) -> None:
        with self._lock:
            for span in spans:
                self._add(span)
            while len(self._traces) > self.max_traces or self.num_spans > self.max_spans:
                self._drop_oldest()

    def _add(self, span: dict) -> None:
        tid = span["trace_id"]
        rid = str(span["attributes"].get(REQUEST_ATTR, ""))
        known = self._by_request.get(rid, set()) if rid else set()
        kept = self._traces.get(tid)
        if (kept is not None and len(kept) >= self.max_spans_per_trace) or (
                rid and tid not in known and len(known) >= self.max_traces_per_request):
            self.num_dropped += 1
            return
        self._traces.setdefault(tid, []).append(span)
        self._traces.move_to_end(tid)
        self.num_spans += 1
        if rid:
            self._by_request.setdefault(rid, set()).add(tid)

    def _drop_oldest(self) -> None:
        tid, dropped = self._traces.popitem(last=False)
        self.num_spans -= len(dropped)
        for span in dropped:
            rid = str(span["attributes"].get(REQUEST_ATTR, ""))
            tids = self._by_request.get(rid)
            if tids is not None:
                tids.discard(tid)
                if not tids:
                    del self._by_request[rid]

    def spans(self) -> list[dict]:
        """Every span held, oldest trace first."""
        with self._lock:
            return [s for spans in self._traces.values() for s in spans]

    def request(self, request_id: str) -> dict:
        with self._lock:
            tids = sorted(self._by_request.get(request_id, ()))
            return {"trace_ids": tids, "spans": [s for t in tids for s in self._traces.get(t, [])]}


def _handler(store: TraceStore):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            prefix = "/v1/requests/"
            if not self.path.startswith(prefix):
                self.send_error(404, "use /v1/requests/<request id>")
                return
            body = json.dumps(store.request(self.path[len(prefix):])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: the store runs inside `starmesh up`
            pass

    return Handler


def edge_table(spans: list[dict]) -> list[dict]:
    """Per-edge latency rows from a request's `edge ...` spans (runtime/edge_stats.py);
    `wait_p50_us`, where the consumer's runtime recorded it: the part of the latency
    between the item's arrival there and its dispatch."""
    rows: dict[str, dict] = {}
    for s in spans:
        if not s["name"].startswith("edge "):
            continue
        a = s["attributes"]
        row = rows.setdefault(s["name"][5:], {"edge": s["name"][5:], "items": 0, "bytes": 0, "latencies_us": [],
                                              "waits_us": [], "transport": a.get("starmesh.transport", "")})
        row["items"] += int(a.get("starmesh.items", 0))
        row["bytes"] += int(a.get("starmesh.bytes", 0))
        if "starmesh.latency_us.p50" in a:
            row["p50_us"], row["max_us"] = a["starmesh.latency_us.p50"], a["starmesh.latency_us.max"]
            if "starmesh.consumer_wait_us.p50" in a:
                row["wait_p50_us"] = a["starmesh.consumer_wait_us.p50"]
        else:
            row["latencies_us"].append(float(a.get("starmesh.latency_us", 0.0)))
            if "starmesh.consumer_wait_us" in a:
                row["waits_us"].append(float(a["starmesh.consumer_wait_us"]))
    for row in rows.values():
        lat, waits = sorted(row.pop("latencies_us")), sorted(row.pop("waits_us"))
        if lat:
            row["p50_us"], row["max_us"] = lat[len(lat) // 2], lat[-1]
        if waits:
            row["wait_p50_us"] = waits[len(waits) // 2]
    return sorted(rows.values(), key=lambda r: r["edge"])


def fetch_request(store_url: str, request_id: str, timeout_s: float = 5.0) -> dict:
    """{"trace_ids", "spans"} of one request from a store's query URL (OSError when the
    store cannot be read)."""
    url = f"{store_url}/v1/requests/{urllib.parse.quote(request_id)}"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.load(resp)


def wait_for_edges(store: TraceStore, request_id: str, timeout_s: float = 15.0) -> list[dict]:
    """The request's edge_table once the conductor's spans reached `store` (they are
    exported in batches, after the request ended); [] when none came in `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = edge_table(store.request(request_id)["spans"])
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)
