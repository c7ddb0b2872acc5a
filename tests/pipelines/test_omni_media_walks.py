"""Which walk a Qwen3-Omni request takes: `speak_media` for media parts of any kinds and
order, `chat_media` when it wants text alone (no talker_media, no code2wav in it); the
media walks are two, with one encoder node and one media prefill, whatever the parts."""
from __future__ import annotations

import pytest

from pipelines.qwen3_omni.graph import speech_graph, speech_walk
from pipelines.qwen3_omni.model import speech_model, speech_placement

TEXT = frozenset({"text"})


@pytest.mark.parametrize("inputs, wanted, walk", [
    ({"input_ids"}, frozenset(), "speak"), ({"input_ids"}, TEXT, "chat"),
    ({"input_ids", "media", "media_parts"}, frozenset(), "speak_media"),
    ({"input_ids", "media", "media_parts"}, TEXT, "chat_media"),
    ({"input_ids", "media", "media_parts"}, frozenset({"text", "audio"}), "speak_media"),
])
def test_the_walk_follows_media_and_wanted_outputs(inputs, wanted, walk):
    assert speech_walk(dict.fromkeys(inputs), wanted) == walk


def test_text_only_media_walk_stops_at_the_decode_loop():
    graph = speech_graph(media=True)
    chat = next(w for w in graph.walks if w.name == "chat_media")
    assert set(chat.input_names) == {"input_ids", "media", "media_parts"}
    assert not {"talker_media", "code2wav"} & {e.dst_node for e in chat.edges}


def test_media_walks_do_not_grow_with_the_combinations():
    """Two media walks (speak, chat) and three media nodes, where each combination of kinds
    had its own pair of walks and its own prefill (ten walks, three encoders, five prefills)."""
    graph = speech_graph(media=True)
    assert [w.name for w in graph.walks] == ["speak", "chat", "speak_media", "chat_media"]
    assert [n.name for n in graph.nodes] == ["prefill", "decode", "talker", "code2wav", "media_encoder",
                                             "prefill_media", "talker_media"]
    assert [w.name for w in speech_graph().walks] == ["speak", "chat"]


def test_the_media_prefill_shares_the_thinker_context():
    model = speech_model("omni", speech_placement(["t:1"], ["k:1"], ["c:1"], ["e:1"]))
    where = model.placement.node_to_service
    assert (where["media_encoder"], where["prefill_media"], where["talker_media"]) == ("encoder", "thinker", "talker")
    assert model.placement.kv_contexts["thinker"] == ("prefill", "decode", "prefill_media")
    assert "speak_media" not in {w.name for w in speech_model("o", speech_placement(["t:1"], ["k:1"])).graph.walks}
