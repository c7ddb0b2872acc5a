"""A Conductor call without the right token is refused before its request is read
(conductor/auth.py): bytes that are no GenerateRequest at all come back UNAUTHENTICATED,
not INVALID_ARGUMENT, so nothing decoded them; with the token the same bytes are the
decoder's INVALID_ARGUMENT. Every method kind is refused the same way; health needs no
token. (The memory a flood of refused 20 MB requests costs: tests/e2e/test_front_door_chaos.py.)"""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conductor.service import ConductorService
from protos.starmesh.v1 import conductor_pb2 as pb
from runtime.background import BackgroundServer

KEY = "auth-refusal-key"
GENERATE, LIST_MODELS = "/starmesh.v1.Conductor/Generate", "/starmesh.v1.Conductor/ListModels"
NOT_A_MESSAGE = b"\xff\xff\xff\xff not a protobuf"
TIMEOUT_S = 30.0  # only a hung call reaches it


@pytest.fixture(scope="module")
def address():
    server = BackgroundServer(ConductorService([], api_key=KEY))
    server.start()
    yield server.address
    server.stop()


def _code(call, payload: bytes, key: str | None) -> tuple[grpc.StatusCode, str]:
    metadata = (("authorization", f"Bearer {key}"),) if key is not None else ()
    try:
        result = call(payload, metadata=metadata, timeout=TIMEOUT_S)
        if hasattr(result, "__iter__") and not isinstance(result, bytes):
            list(result)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


@pytest.mark.parametrize("key", [None, "wrong"])
def test_a_call_without_the_token_is_refused_before_its_body_is_decoded(address, key):
    with grpc.insecure_channel(address) as channel:
        code, details = _code(channel.unary_stream(GENERATE), NOT_A_MESSAGE, key)
        assert code == grpc.StatusCode.UNAUTHENTICATED, (code, details)
        code, _ = _code(channel.unary_unary(LIST_MODELS), NOT_A_MESSAGE, key)
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_with_the_token_the_same_bytes_reach_the_decoder(address):
    with grpc.insecure_channel(address) as channel:
        code, details = _code(channel.unary_stream(GENERATE), NOT_A_MESSAGE, KEY)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "do not decode" in details, (code, details)
        code, _ = _code(channel.unary_unary(LIST_MODELS), pb.ListModelsRequest().SerializeToString(), KEY)
        assert code == grpc.StatusCode.OK


def test_a_large_unauthenticated_body_is_refused_and_health_needs_no_token(address):
    body = pb.GenerateRequest(model="m", text="x" * (8 << 20)).SerializeToString()
    options = [("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        for _ in range(3):
            code, details = _code(channel.unary_stream(GENERATE), body, None)
            assert code == grpc.StatusCode.UNAUTHENTICATED and "authorization" in details.lower(), (code, details)
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
