"""starmesh protobuf package."""
