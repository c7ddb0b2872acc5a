#!/usr/bin/env bash
# Regenerates protos/starmesh/v1/*_pb2.py, *_pb2_grpc.py and *.pyi from the .proto files.
# The include root is the repository root, so generated modules import each other as
# `protos.starmesh.v1.*` and no sys.path tricks are needed. grpc_tools comes with the
# `test` extra (grpcio-tools, pinned with grpcio so the stubs match the runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
rm -f protos/starmesh/v1/*_pb2*.py protos/starmesh/v1/*_pb2*.pyi
"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  protos/starmesh/v1/*.proto
echo "generated: $(ls protos/starmesh/v1/*_pb2*.py* | tr '\n' ' ')"
