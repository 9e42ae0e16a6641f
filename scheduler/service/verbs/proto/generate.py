"""Regenerate the committed gRPC stubs: `python scheduler/service/verbs/proto/generate.py` from the repo root."""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
PROTO = "meshfit/v1/placement.proto"
PACKAGE = "scheduler.service.verbs.proto.meshfit.v1"


def main() -> int:
    """Run protoc and make the generated import absolute (the stubs live inside the scheduler package)."""
    code = protoc.main(["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={PROTO_ROOT}",
                        f"--grpc_python_out={PROTO_ROOT}", str(PROTO_ROOT / PROTO)])
    if code:
        return code
    stub = PROTO_ROOT / "meshfit/v1/placement_pb2_grpc.py"
    text = stub.read_text().replace("from meshfit.v1 import placement_pb2", f"from {PACKAGE} import placement_pb2")
    stub.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
