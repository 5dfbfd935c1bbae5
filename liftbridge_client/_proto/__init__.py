"""Generated protobuf and gRPC modules."""
