"""Tensor transport (DESIGN section 8): inline bytes, shared-memory arena, Mooncake.

The core speaks `TensorRef` dataclasses and torch tensors; `transport.wire`
converts to and from protobuf at the gRPC edge.
"""
