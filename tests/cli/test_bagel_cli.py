"""`starmesh imagine`'s options become the params of the model that answers, as its
ListModels card names them (cli/image_params.py): BAGEL's card (built by the conductor's
ListModels code from the served graph) takes `--guidance` as `cfg_text_scale`, refuses
SD3's options naming them, and `--param` reads a value as the card's type. The whole
command against a mesh: tests/gateway/test_bagel_sdk.py."""
from __future__ import annotations

import pytest

from cli.image_params import card_params, client_aliases, given_options
from cli.main import build_parser


@pytest.fixture(scope="module")
def cards():
    from client.model_card import cards_from_proto
    from conductor.model_info import model_info
    from pipelines.bagel.model import served_model as bagel
    from pipelines.sd3.model import served_model as sd3
    from protos.starmesh.v1 import conductor_pb2 as pb

    reply = pb.ListModelsResponse()
    for model in (bagel("bagel", "127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1"),
                  sd3("sd3", "127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1", fused=True)):
        reply.models.append(model_info(model, False))
    return cards_from_proto(reply)


def _options(*argv: str) -> dict:
    return given_options(build_parser().parse_args(["imagine", *argv, "-o", "x.png"]))


def test_only_the_options_given_are_sent_under_the_cards_names(cards):
    options = _options("a fox", "--steps", "8", "--guidance", "4", "--size", "32x48", "--param", "cfg_img_scale=2",
                       "--param", "think=true", "--param", "cfg_renorm_type=channel")
    params = card_params(options, cards["bagel"], client_aliases("bagel"))
    assert params == {"steps": 8, "cfg_text_scale": 4.0, "width": 32, "height": 48, "cfg_img_scale": 2.0,
                      "think": True, "cfg_renorm_type": "channel"}
    assert card_params(_options("a fox"), cards["bagel"], {}) == {}  # the model's defaults
    sd3 = card_params(_options("a fox", "--guidance", "5", "--renorm", "1"), cards["sd3"], client_aliases("sd3"))
    assert sd3 == {"guidance": 5.0, "renorm": 1.0}


@pytest.mark.parametrize("argv, named", [
    (("--renorm", "1"), "--renorm"),                       # an SD3 option BAGEL has no param for
    (("--negative-prompt", "blur"), "--negative-prompt"),
    (("--param", "cfg_img_scale=lots"), "--param cfg_img_scale"),
    (("--param", "think=maybe"), "--param think"),
    (("--param", "nonsense=1"), "--param nonsense"),
])
def test_an_option_bagel_does_not_take_is_refused_naming_it(cards, argv, named):
    with pytest.raises(ValueError, match=named):
        card_params(_options("a fox", *argv), cards["bagel"], client_aliases("bagel"))


@pytest.mark.parametrize("argv, named", [(("--param", "steps"), "--param"), (("--size", "32by32"), "--size")])
def test_malformed_options_are_refused_naming_them(argv, named):
    with pytest.raises(ValueError, match=named):
        _options("a fox", *argv)


def test_the_prompt_is_given_once(capsys, tmp_path):
    from cli.main import main

    assert main(["imagine", "-o", str(tmp_path / "x.png")]) == 2
    assert main(["imagine", "a fox", "--prompt", "a fox", "-o", str(tmp_path / "x.png")]) == 2
    assert "give the prompt once" in capsys.readouterr().err
