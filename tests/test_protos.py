"""The committed generated stubs describe exactly the messages of the .proto files."""
import glob
import subprocess
import sys

from google.protobuf import descriptor_pb2

from protos.starmesh.v1 import component_pb2, conductor_pb2, session_pb2, tensor_pb2


def _normalized(proto: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """Drops what CopyToProto never fills: source info and the derived json names."""
    proto.ClearField("source_code_info")
    stack = list(proto.message_type)
    while stack:
        message = stack.pop()
        for field in message.field:
            field.ClearField("json_name")
        stack.extend(message.nested_type)
    return proto


def test_committed_stubs_match_proto_sources(tmp_path):
    out = tmp_path / "set.pb"
    protos = sorted(glob.glob("protos/starmesh/v1/*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", ".", f"--descriptor_set_out={out}", *protos],
        check=True,
    )
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    fresh_by_name = {f.name: f for f in fresh.file}
    committed = {m.DESCRIPTOR.name: m for m in (component_pb2, conductor_pb2, session_pb2, tensor_pb2)}
    assert set(fresh_by_name) == set(committed), "a .proto file has no committed stub (run scripts/gen_protos.sh)"
    for name, module in committed.items():
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        assert _normalized(proto) == _normalized(fresh_by_name[name]), f"{name}: committed stubs are stale; run scripts/gen_protos.sh"


def test_every_opening_item_carries_trace_context():
    fields = component_pb2.OpenNode.DESCRIPTOR.fields_by_name
    assert "traceparent" in fields and "tracestate" in fields
