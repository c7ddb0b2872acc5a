"""starmesh.v1 messages and services (generated modules live beside this file)."""
from protos.starmesh.v1 import component_pb2, component_pb2_grpc, conductor_pb2, conductor_pb2_grpc, tensor_pb2

__all__ = ["component_pb2", "component_pb2_grpc", "conductor_pb2", "conductor_pb2_grpc", "tensor_pb2"]
