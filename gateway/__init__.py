"""The OpenAI-compatible HTTP front door: a thin translator from OpenAI's request and
response shapes to the conductor's gRPC API (through client/). `starmesh gateway` runs it."""
