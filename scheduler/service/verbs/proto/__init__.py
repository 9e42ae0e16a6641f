"""Generated gRPC stubs for meshfit.v1 (see placement.proto)."""
