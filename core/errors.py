"""Domain errors. Each carries the name of the gRPC status it maps to.

The core never imports grpc: the service layer's error-mapping decorator turns
`status` into a `grpc.StatusCode` at the edge. Messages name the bad field.
"""


class StarmeshError(Exception):
    """Base of every error that crosses a service boundary as a status code."""

    status = "INTERNAL"


class InvalidArgument(StarmeshError):
    status = "INVALID_ARGUMENT"


class NotFound(StarmeshError):
    status = "NOT_FOUND"


class Unavailable(StarmeshError):
    status = "UNAVAILABLE"


class ResourceExhausted(StarmeshError):
    status = "RESOURCE_EXHAUSTED"


class Overloaded(ResourceExhausted):
    """Refused for capacity, not for what it asked: the client should retry after
    `retry_after_ms` (the gRPC edge sends it as RetryInfo and a retry-after-ms trailer)."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = int(retry_after_ms)
class Unauthenticated(StarmeshError):
    status = "UNAUTHENTICATED"


class FieldError(StarmeshError):
    """A StarmeshError re-raised with the wire field prefixed to its message."""

    def __init__(self, cause: StarmeshError, message: str) -> None:
        super().__init__(message)
        self.status = cause.status


class TransportError(StarmeshError):
    """Base of tensor transport failures."""


class BadTensorRef(TransportError, InvalidArgument):
    """A TensorRef that can never resolve: bad dtype, shape, range or size."""


class UnknownLease(TransportError, NotFound):
    """The arena or lease named by a reference does not exist (any more)."""


class PeerUnavailable(TransportError, Unavailable):
    """The producer that owns the referenced bytes is gone or unreachable."""


class ArenaFull(TransportError, ResourceExhausted):
    """The arena had no room within the bounded wait."""


class GraphError(InvalidArgument):
    """An invalid graph or placement: the message names the node, edge or walk at fault."""
