"""A small local trace store: an OTLP/gRPC receiver (opentelemetry-proto's TraceService)
that keeps the spans of recent traces in memory, and a JSON query endpoint over HTTP.

    store = TraceStore(); store.start()          # OTLP on store.otlp_address
    GET http://<store.http_address>/v1/requests/<request id>  -> {"trace_ids", "spans"}

Bounded: the oldest traces are dropped past `max_traces`. `starmesh up` runs one and
points every process at it (STARMESH_TRACE_STORE); `starmesh trace` reads it over HTTP
(fetch_request).
"""
from __future__ import annotations

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

from runtime.decode_guard import SyncDecodeGuard

REQUEST_ATTR = "starmesh.request_id"


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in ("string_value", "bool_value", "int_value", "double_value") else str(v)


def span_dicts(request: trace_service_pb2.ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in request.resource_spans:
        service = next((_value(a.value) for a in rs.resource.attributes if a.key == "service.name"), "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({"trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_id": s.parent_span_id.hex(), "name": s.name, "service": service,
                            "start_ns": s.start_time_unix_nano, "end_ns": s.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in s.attributes}})
    return out


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: "TraceStore") -> None:
        self.store = store

    def Export(self, request, context):
        self.store.add(span_dicts(request))
        return trace_service_pb2.ExportTraceServiceResponse()


class TraceStore:
    def __init__(self, host: str = "127.0.0.1", otlp_port: int = 0, http_port: int = 0,
                 max_traces: int = 2000) -> None:
        self.host, self.max_traces = host, max_traces
        self._traces: OrderedDict[str, list[dict]] = OrderedDict()
        self._by_request: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[SyncDecodeGuard()])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Receiver(self), self._grpc)
        self.otlp_port = self._grpc.add_insecure_port(f"{host}:{otlp_port}")
        self._http = ThreadingHTTPServer((host, http_port), _handler(self))
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
                tid = span["trace_id"]
                self._traces.setdefault(tid, []).append(span)
                self._traces.move_to_end(tid)
                rid = span["attributes"].get(REQUEST_ATTR)
                if rid:
                    self._by_request.setdefault(str(rid), set()).add(tid)
            while len(self._traces) > self.max_traces:
                tid, dropped = self._traces.popitem(last=False)
                for span in dropped:
                    self._by_request.pop(str(span["attributes"].get(REQUEST_ATTR, "")), None)

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
    """Per-edge latency rows from a request's `edge ...` spans (conductor/edge_stats.py)."""
    rows: dict[str, dict] = {}
    for s in spans:
        if not s["name"].startswith("edge "):
            continue
        a = s["attributes"]
        row = rows.setdefault(s["name"][5:], {"edge": s["name"][5:], "items": 0, "bytes": 0, "latencies_us": [],
                                              "transport": a.get("starmesh.transport", "")})
        row["items"] += int(a.get("starmesh.items", 0))
        row["bytes"] += int(a.get("starmesh.bytes", 0))
        if "starmesh.latency_us.p50" in a:
            row["p50_us"], row["max_us"] = a["starmesh.latency_us.p50"], a["starmesh.latency_us.max"]
        else:
            row["latencies_us"].append(float(a.get("starmesh.latency_us", 0.0)))
    for row in rows.values():
        lat = sorted(row.pop("latencies_us"))
        if lat:
            row["p50_us"], row["max_us"] = lat[len(lat) // 2], lat[-1]
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
