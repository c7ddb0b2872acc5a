"""How a client reaches a conductor: its address, the API key and TLS. Every client (the
SDK, the CLI commands, the benchmarks) opens its channels here, so the token and the
certificates are applied the same way everywhere.

    conn = Connection("127.0.0.1:50050", api_key="s3cret", tls=tls_config(ca="ca.pem"))
    async with conn.aio_channel() as channel: stub = ConductorStub(channel)   # grpc.aio
    with conn.channel() as channel: ...                                       # blocking

The key travels as `authorization: Bearer <key>` metadata on every call of the channel
(core/bearer.py), added by an interceptor, so stubs need no per-call metadata.
"""
from __future__ import annotations

import collections
import os
from dataclasses import dataclass

import grpc

from core.bearer import API_KEY_ENV, bearer_metadata
from runtime.tls import TlsConfig, aio_channel, sync_channel

MiB = 1 << 20
DEFAULT_MAX_MESSAGE_BYTES = 256 * MiB  # images and world-model tensors come back inline


@dataclass(frozen=True)
class Connection:
    """address: the conductor's HOST:PORT; api_key: "" sends none; tls: None is plaintext
    (runtime.tls.TlsConfig: ca to check the conductor, cert/key for mutual TLS)."""

    address: str
    api_key: str = ""
    tls: TlsConfig | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        if not self.address:
            raise ValueError("connection.address is empty (HOST:PORT of the conductor)")
        if self.api_key != self.api_key.strip() or "\n" in self.api_key:
            raise ValueError("connection.api_key has whitespace around or inside it")
        if self.max_message_bytes < 4 * MiB:
            raise ValueError(f"connection.max_message_bytes must be >= 4 MiB, got {self.max_message_bytes}")

    @classmethod
    def from_env(cls, address: str, api_key: str | None = None, tls: TlsConfig | None = None) -> "Connection":
        """`api_key` None reads $STARMESH_API_KEY."""
        return cls(address, os.environ.get(API_KEY_ENV, "") if api_key is None else api_key, tls)

    def options(self) -> list[tuple[str, int]]:
        return [("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", self.max_message_bytes)]

    def aio_channel(self) -> grpc.aio.Channel:
        interceptors = _aio_interceptors(self.api_key) if self.api_key else None
        return aio_channel(self.address, self.tls, self.options(), interceptors)

    def channel(self) -> grpc.Channel:
        channel = sync_channel(self.address, self.tls, self.options())
        return grpc.intercept_channel(channel, _SyncBearer(self.api_key)) if self.api_key else channel


def _with_token(details, api_key: str, make):
    metadata = [*(details.metadata or ()), *bearer_metadata(api_key)]
    return make(details, metadata)


class _Details(collections.namedtuple("_Details", "method timeout metadata credentials wait_for_ready compression"),
               grpc.ClientCallDetails):
    """The blocking API's call details with the token added."""


def _sync_details(details, metadata) -> _Details:
    return _Details(details.method, details.timeout, metadata, details.credentials,
                    getattr(details, "wait_for_ready", None), getattr(details, "compression", None))


def _aio_details(details, metadata) -> grpc.aio.ClientCallDetails:
    return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                      details.wait_for_ready)


class _SyncBearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, api_key: str) -> None:
        self.api_key = api_key

    def _call(self, continuation, details, request):
        return continuation(_with_token(details, self.api_key, _sync_details), request)

    intercept_unary_unary = intercept_unary_stream = _call
    intercept_stream_unary = intercept_stream_stream = _call


class _AioBearer:
    def __init__(self, api_key: str) -> None:
        self.api_key = api_key

    async def _call(self, continuation, details, request):
        return await continuation(_with_token(details, self.api_key, _aio_details), request)


class _AioUnaryUnary(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    intercept_unary_unary = _AioBearer._call


class _AioUnaryStream(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    intercept_unary_stream = _AioBearer._call


class _AioStreamUnary(_AioBearer, grpc.aio.StreamUnaryClientInterceptor):
    intercept_stream_unary = _AioBearer._call


class _AioStreamStream(_AioBearer, grpc.aio.StreamStreamClientInterceptor):
    intercept_stream_stream = _AioBearer._call


def _aio_interceptors(api_key: str) -> list:
    """One interceptor per call kind: a grpc.aio channel files each under one kind only."""
    return [kind(api_key) for kind in (_AioUnaryUnary, _AioUnaryStream, _AioStreamUnary, _AioStreamStream)]
