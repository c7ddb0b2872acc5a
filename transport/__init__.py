"""Tensor transport: inline bytes, shared-memory arena, Mooncake.

The core speaks `TensorRef` dataclasses and torch tensors; `transport.ref_proto`
converts to and from protobuf at the gRPC edge.
"""
