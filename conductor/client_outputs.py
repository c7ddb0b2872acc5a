"""Walk outputs as the client receives them: by value.

A service exports large outputs into its shared-memory arena; the client of the
conductor cannot map that arena (it may run anywhere), so references bound for the
client are copied into the event here (the lease stays until the request ends, when
the conductor's Cancel frees it at its producer).
"""
from __future__ import annotations

from protos.starmesh.v1 import conductor_pb2 as pb
from transport.codec import inline_ref
from transport.config import default_host_id
from core.errors import PeerUnavailable
from transport.peers import PeerArenas
from transport.refs import InlineLocation, ShmLocation, TensorRef
from transport.ref_proto import ref_to_proto


class ClientOutputs:
    def __init__(self) -> None:
        self.peers = PeerArenas()
        self.host_id = default_host_id()

    def by_value(self, value) -> TensorRef:
        if not isinstance(value, TensorRef):
            return inline_ref(value)
        loc = value.location
        if isinstance(loc, InlineLocation):
            return value
        if isinstance(loc, ShmLocation) and loc.host_id == self.host_id:
            data = bytes(self.peers.buffer(loc.arena, loc.offset, loc.nbytes, loc.lease_id))
            return TensorRef(value.dtype, value.shape, InlineLocation(data))
        raise PeerUnavailable(f"output in {value.kind} memory of another host ({getattr(loc, 'host_id', '?')}) "
                              "cannot be forwarded to the client")

    def event(self, request_id: str, name: str, value) -> pb.GenerateEvent:
        event = pb.GenerateEvent(request_id=request_id)
        event.tensor.name = name
        ref_to_proto(self.by_value(value), event.tensor.tensor)
        return event

    def close(self) -> None:
        self.peers.close()
