"""Server-sent events as OpenAI streams them: `data: <json>` blocks, `data: [DONE]` last
for chat completions."""
from __future__ import annotations

import json

MEDIA_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
