"""Errors in OpenAI's shape, with the HTTP status a client library maps to its typed
exception (400 BadRequestError, 401 AuthenticationError, 404 NotFoundError, 429
RateLimitError, ...):

    {"error": {"message": "...", "type": "invalid_request_error", "param": "voice", "code": null}}

A conductor failure (client.call_failed.CallFailed) maps by its gRPC status; its message
names the bad field in the conductor's terms (`params.speaker`), which `fields` turns
back into the name the HTTP caller used (`voice`), in `param` and at the head of the
message; an extension param is its own name (`params.max_frames` -> `max_frames`).
"""
from __future__ import annotations

import math
import re
from typing import Mapping

from client.call_failed import CallFailed

# gRPC status -> (HTTP status, OpenAI error type)
HTTP_OF = {
    "INVALID_ARGUMENT": (400, "invalid_request_error"),
    "OUT_OF_RANGE": (400, "invalid_request_error"),
    "FAILED_PRECONDITION": (400, "invalid_request_error"),
    "ALREADY_EXISTS": (409, "invalid_request_error"),
    "NOT_FOUND": (404, "invalid_request_error"),
    "UNAUTHENTICATED": (401, "authentication_error"),
    "PERMISSION_DENIED": (403, "permission_error"),
    "RESOURCE_EXHAUSTED": (429, "rate_limit_error"),
    "UNAVAILABLE": (503, "service_unavailable"),
    # the mesh cancelled the call (a conductor stopping, the gateway's own channel
    # closing): not the client's doing, and a retry may be served; a client that leaves
    # is answered 499 where the gateway sees it go (gateway.responses.ClientGone)
    "CANCELLED": (503, "service_unavailable"),
    "DEADLINE_EXCEEDED": (504, "timeout"),
    "UNIMPLEMENTED": (501, "invalid_request_error"),
}
# how a conductor message starts when it names a request field
_FIELD = re.compile(r"^(params\.\w+(?:/\w+)?|messages(\[\d+\](\.\w+(\[\d+\])?)*)?|output_modalities(\[\d+\])?|text|model"
                    r"|input_ids)")


MAX_ECHO = 1000  # characters of a message or param in an error body: a client's long string is cut


class ApiError(Exception):
    """status: the HTTP status; param: the request field at fault (None: none);
    headers: e.g. Retry-After for a capacity refusal."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {"error": {"message": _cut(self.message), "type": self.type, "param": _cut(self.param),
                          "code": self.code}}


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= MAX_ECHO else text[:MAX_ECHO] + "..."


def bad_field(param: str, message: str) -> ApiError:
    """400 naming `param` (the message should name it too)."""
    return ApiError(400, message, param=param)


def from_call_failed(e: CallFailed, fields: Mapping[str, str] = {}) -> ApiError:
    """The conductor's failure as an ApiError. `fields`: conductor field -> HTTP field
    (e.g. "params.speaker" -> "voice"), for the `param` of bad-input errors."""
    status, type_ = HTTP_OF.get(e.code, (500, "server_error"))
    headers = {}
    if e.code == "RESOURCE_EXHAUSTED" and e.retry_after_ms is None:
        status = 413  # a limit on what was asked (too many ids, too large), not on capacity
        type_ = "invalid_request_error"
    if e.retry_after_ms is not None:
        headers = {"Retry-After": str(max(1, math.ceil(e.retry_after_ms / 1000))),
                   "retry-after-ms": str(e.retry_after_ms)}  # what the openai SDK reads first
    param, message = None, e.message
    if status in (400, 404, 413):
        found = _FIELD.match(message)
        if found:
            name = found.group(1)
            param = fields.get(name) or fields.get(name.split("[")[0]) or name.removeprefix("params.")
            rest = message[len(name):]
            if param != name and "[" not in name and rest[:1] in ("", " ", ":"):  # the caller's name, first
                message = param + rest
    return ApiError(status, message, type_, param, e.code.lower(), headers)
