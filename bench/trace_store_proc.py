"""A local OTLP trace store in a child process (benchmarks: its CPU is not the caller's).

    python -m bench.trace_store_proc     # prints {"otlp": host:port, "http": url}, runs until stdin closes

`TraceStoreProcess` is the caller's side: start it, give `otlp` to the processes
(STARMESH_TRACE_STORE), read requests' spans over HTTP.
"""
from __future__ import annotations

import json
import subprocess
import sys


class TraceStoreProcess:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.trace_store_proc"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        info = json.loads(self.proc.stdout.readline())
        self.otlp, self.http = info["otlp"], info["http"]

    def spans(self, request_id: str) -> list[dict]:
        from cluster.trace_store import fetch_request

        return fetch_request(self.http, request_id)["spans"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def main() -> None:
    from cluster.trace_store import TraceStore

    store = TraceStore(max_traces=20000).start()
    print(json.dumps({"otlp": store.otlp_address, "http": store.http_address}), flush=True)
    sys.stdin.read()
    store.stop()


if __name__ == "__main__":
    main()
