"""Kept KV contexts as a request names them: the client's two params and what one
node run is told (read this context, keep the result as that one, on behalf of whom).

A context id is "ctx_" + 32 lowercase hex digits: 128 random bits, so an id cannot be
guessed; every engine of one model keeps its part of a request's context under the same
id (a voice turn touches the thinker and the talker). The owner is set by the conductor
from the caller's credentials, never read from a request body: an id presented by
another owner is NOT_FOUND, exactly like one that never existed.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from core.errors import InvalidArgument
from core.params import RequestParams, param

PREFIX = "ctx_"
END_USER = "x-starmesh-end-user"  # gRPC metadata: the end user a front end acts for (owner of contexts)
_ID = re.compile(r"ctx_[0-9a-f]{32}")


def new_context_id() -> str:
    return PREFIX + secrets.token_hex(16)


def check_context_id(value: str, field: str) -> str:
    if not _ID.fullmatch(value):
        raise InvalidArgument(f"{field} must be a context id from an earlier reply (\"ctx_\" + 32 hex digits), "
                              f"got {value[:48]!r}")
    return value


@dataclass(frozen=True)
class ContextParams(RequestParams):
    """The request keys of kept contexts (every model whose engine caches KV reads them)."""

    context_id: str | None = param(None, kind=str, help="continue this kept context (Usage.context_id of a reply)")
    keep_context: bool = param(False, help="keep this request's KV as a new context; its id comes in Usage")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.context_id is not None:
            check_context_id(self.context_id, "params.context_id")


@dataclass(frozen=True)
class ContextUse:
    """What one node run does with kept contexts. read_id: continue it ("" = start from the
    prompt alone); keep_id: keep the result under it ("" = keep nothing); owner: whose they
    are; slot: which of a walk's contexts ("" for the only one)."""

    read_id: str = ""
    keep_id: str = ""
    owner: str = ""
    slot: str = ""

    def __post_init__(self) -> None:
        for name in ("read_id", "keep_id"):
            if getattr(self, name):
                check_context_id(getattr(self, name), f"contexts.{name}")
        if not (self.read_id or self.keep_id):
            raise InvalidArgument("contexts: a context use names read_id, keep_id or both")
