"""A failed conductor call as a plain exception: the status name, the message (which
names the bad field, the refused limit or the service that is down) and the retry hint
of a capacity refusal. Front ends map it without importing grpc."""
from __future__ import annotations


class CallFailed(Exception):
    """code: the gRPC status name ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", ...);
    retry_after_ms: the conductor's hint on a capacity refusal, else None."""

    def __init__(self, code: str, message: str, retry_after_ms: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.retry_after_ms = code, message, retry_after_ms


def call_failed(error) -> CallFailed:
    """A grpc.aio.AioRpcError (or grpc.RpcError) as CallFailed, with the
    `retry-after-ms` trailer read when there is one."""
    retry = None
    for key, value in error.trailing_metadata() or ():
        if key == "retry-after-ms" and str(value).isdigit():
            retry = int(value)
    return CallFailed(error.code().name, error.details() or "", retry)
