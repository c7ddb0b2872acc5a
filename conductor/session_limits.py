"""What one conductor's sessions may hold (conductor.session_core, session_servicer).

    SessionLimits(max_sessions=64, max_context_tokens=32768, idle_timeout_s=600, max_audio_s=120)

max_sessions: open at once (one more is RESOURCE_EXHAUSTED); max_context_tokens: what a
conversation's kept context may reach, its next answer's room included (past it, the
oldest turns are dropped and what remains is prefilled again); idle_timeout_s: a session
with no input and no response running this long ends (DEADLINE_EXCEEDED); max_audio_s:
appended audio not yet committed (past it an append is refused, naming append_audio);
max_items: conversation items; default_answer_tokens: the room kept for an answer whose
params name no max_new_tokens; max_unread_events: events (audio deltas, mostly) a client
has not read: past them the session ends (RESOURCE_EXHAUSTED) and holds nothing meanwhile.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidArgument


@dataclass(frozen=True)
class SessionLimits:
    max_sessions: int = 64
    max_context_tokens: int = 32768
    idle_timeout_s: float = 600.0
    max_audio_s: float = 120.0
    max_items: int = 4096
    default_answer_tokens: int = 256
    max_unread_events: int = 4096

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_context_tokens", "max_items", "default_answer_tokens", "max_unread_events"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"sessions.{name} must be an integer >= 1, got {value!r}")
        for name in ("idle_timeout_s", "max_audio_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgument(f"sessions.{name} must be > 0, got {value!r}")
