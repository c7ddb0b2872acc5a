"""Kept contexts through the gateway, as the official `openai` SDK sends them: a chat
turn kept with `keep_context` (extra body) reports its id in `usage.context_id`; the
next turn continues it with `context_id` and reports the earlier turn's tokens in
`usage.prompt_tokens_details.cached_tokens` (tests/e2e/test_kept_contexts_mesh.py checks
the answers against the conversation re-sent); the context belongs to its `user`."""
from __future__ import annotations

import base64
import uuid

import openai
import pytest

pytestmark = pytest.mark.timeout(300)
GREEDY = {"max_tokens": 6, "temperature": 0}


def _chat(sdk, messages, user="alice", **extra):
    return sdk.chat.completions.create(model="omni", messages=messages, user=user, extra_body=extra, **GREEDY)


def test_a_kept_chat_continues_from_its_context(sdk):
    # a first turn no other test sent, so that nothing of it but the chat template is cached
    first = _chat(sdk, [{"role": "user", "content": f"Kept {uuid.uuid4().hex}"}], keep_context=True)
    kept = first.usage.model_extra["context_id"]
    assert kept.startswith("ctx_") and first.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens // 2
    second = _chat(sdk, [{"role": "user", "content": "And then?"}], context_id=kept)
    # everything the first turn left in the context was not computed again
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
    assert second.usage.prompt_tokens > second.usage.prompt_tokens_details.cached_tokens
    assert second.choices[0].message.content is not None


def test_another_users_context_is_not_found(sdk):
    kept = _chat(sdk, [{"role": "user", "content": "Hi"}], keep_context=True).usage.model_extra["context_id"]
    with pytest.raises(openai.NotFoundError):
        _chat(sdk, [{"role": "user", "content": "Hi again"}], user="mallory", context_id=kept)
    with pytest.raises(openai.BadRequestError) as e:
        _chat(sdk, [{"role": "user", "content": "Hi"}], context_id="not-a-context")
    assert e.value.body["param"] == "context_id"
    with pytest.raises(openai.BadRequestError) as e:
        _chat(sdk, [{"role": "user", "content": "Hi"}], user="\u00e9" * 3)
    assert e.value.body["param"] == "user"


def test_a_spoken_answer_can_continue_a_context(sdk):
    """The thinker continues the context; the talker speaks the new turn (its own history
    is not kept yet: docs/kv-reuse.md)."""
    kept = _chat(sdk, [{"role": "user", "content": "Hello there"}], keep_context=True).usage.model_extra["context_id"]
    reply = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": "Again"}],
                                        modalities=["text", "audio"], audio={"voice": "ethan", "format": "wav"},
                                        user="alice", extra_body={"context_id": kept, "max_frames": 10}, **GREEDY)
    assert reply.usage.prompt_tokens_details.cached_tokens > 0
    assert len(base64.b64decode(reply.choices[0].message.audio.data)) > 44  # a WAV with samples
