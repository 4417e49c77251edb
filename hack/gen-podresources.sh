#!/usr/bin/env bash
# Regenerate migctl/adapters/podresources/api_pb2.py, api_pb2.pyi and api_pb2_grpc.py from api.proto (grpcio-tools).
# After a regeneration, raise the protobuf floor in pyproject.toml to the version the gencode checks for.
set -euo pipefail
cd "$(dirname "$0")/../migctl/adapters/podresources"
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. api.proto
# grpc's generator imports the message module as a top-level one; make it relative to the package.
sed -i 's/^import api_pb2 as api__pb2$/from . import api_pb2 as api__pb2/' api_pb2_grpc.py
