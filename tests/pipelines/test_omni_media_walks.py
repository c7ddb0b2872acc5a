"""Which walk a Qwen3-Omni request takes: `speak_<kinds>` for media, `chat_<kinds>` when it
wants text alone (no talker_media, no code2wav in it), a video with an image refused."""
from __future__ import annotations

import pytest

from core.errors import InvalidArgument
from pipelines.qwen3_omni.graph import speech_graph, speech_walk
from pipelines.qwen3_omni.media_walks import COMBOS

TEXT = frozenset({"text"})


@pytest.mark.parametrize("inputs, wanted, walk", [
    ({"input_ids"}, frozenset(), "speak"), ({"input_ids"}, TEXT, "chat"),
    ({"input_ids", "video"}, frozenset(), "speak_video"), ({"input_ids", "video"}, TEXT, "chat_video"),
    ({"input_ids", "audio", "video"}, TEXT, "chat_audio_video"),
    ({"input_ids", "audio", "image"}, frozenset({"text", "audio"}), "speak_audio_image"),
])
def test_the_walk_follows_media_and_wanted_outputs(inputs, wanted, walk):
    assert speech_walk(dict.fromkeys(inputs), wanted) == walk


def test_text_only_media_walks_stop_at_the_decode_loop():
    graph = speech_graph(media=COMBOS)
    for combo in COMBOS:
        chat = next(w for w in graph.walks if w.name == "chat_" + "_".join(combo))
        assert set(chat.input_names) == {"input_ids", *combo}
        assert not {"talker_media", "code2wav"} & {e.dst_node for e in chat.edges}


def test_a_video_with_an_image_is_refused():
    with pytest.raises(InvalidArgument, match="image and video"):
        speech_walk({"input_ids": 0, "image": 0, "video": 0})
