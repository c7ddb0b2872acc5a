"""`starmesh demo` picks its requests from ListModels' cards, naming no model: every
model that speaks text gets a bounded speech request (codec frames where it has them,
else text tokens), the first as speech.wav under the traced request id."""
from __future__ import annotations

from pathlib import Path

from cli.demo import _speak_argv, first_editor
from client.model_card import ModelCard, ParamCard


def _card(name: str, *params: str, makes: tuple[str, ...] = ("text", "audio"), inputs: tuple[str, ...] = ()):
    return ModelCard(name, makes, True, (), "", {p: ParamCard(p, "int", None, 1, None, False, "") for p in params},
                     16000, inputs)


def test_a_speech_request_is_bounded_by_what_the_model_takes():
    framed = _speak_argv(_card("a", "max_frames", "max_new_tokens"), "hi", Path("a.wav"), "h:1")
    assert framed[:4] == ["speak", "--model", "a", "--text"] and framed[-2:] == ["--max-frames", "100"]
    tokens = _speak_argv(_card("b", "max_new_tokens"), "hi", Path("b.wav"), "h:1")
    assert tokens[-2:] == ["--max-text-tokens", "140"] and ["--address", "h:1"] == tokens[7:9]


def test_the_editor_is_the_first_model_that_draws_and_takes_an_image():
    omni = _card("omni", inputs=("prompt", "media"))                        # takes images, draws none
    sd3 = _card("sd3", makes=("image",), inputs=("prompt",))                # draws, takes no image
    bagel = _card("bagel", makes=("text", "image"), inputs=("prompt", "media", "media_parts"))
    assert first_editor([omni, sd3, bagel]) is bagel
    assert first_editor([omni, sd3]) is None
