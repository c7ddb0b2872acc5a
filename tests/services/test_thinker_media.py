"""The shared LLM component takes a model's specifics from its thinker hook only: built
through the registry, a Qwen3-Omni checkpoint's thinker feeds a talker (embeddings and
the accept layer) and runs prefill_media on interleaved parts, sending the hook's
outputs with its first token; built without hooks it is a plain LLM that refuses media;
a text checkpoint has no hook; a hook's bad specifics are named."""
from __future__ import annotations

import pytest
import torch

from cluster.registry import build_component, hooks_for
from core.errors import InvalidArgument
from engine.engine_config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from runtime.items import NodeOutput, OpenNode
from services.thinker.component import ThinkerComponent
from services.thinker.hooks import MediaPrompt, ThinkerHook, thinker_hook
from tests.engine.models.test_omni_media import png_bytes, sine, wav_bytes
from tests.pipelines.omni_parts import encode_parts, template_ids
from engine.models.qwen3_omni import THINKER_PART

pytestmark = pytest.mark.timeout(120)

CONTENT = [("image", png_bytes(56, 42, seed=1)), "Compare this ", ("audio", wav_bytes(sine(220, 1.0, 16000))),
           ("image", png_bytes(28, 28, seed=3))]


def _prefill(thinker: ThinkerComponent, node: str, inputs: dict) -> dict:
    thinker.open(OpenNode("r", node, params={"max_new_tokens": 4.0}), inputs)
    while True:
        for ev in thinker.step():
            if isinstance(ev, NodeOutput) and ev.node == node:
                thinker.cancel("r")
                return ev.tensors


def test_the_registry_gives_the_omni_thinker_its_hook(tiny_omni):
    thinker = build_component("thinker", checkpoint=str(tiny_omni), num_blocks=64)
    assert thinker.engine.config.return_embeddings and thinker.engine.config.capture_layer is not None
    ids = template_ids(tiny_omni, CONTENT)
    encoded = encode_parts(tiny_omni, CONTENT)
    out = _prefill(thinker, "prefill_media", {"input_ids": torch.tensor(ids), **encoded})
    built = thinker.hook.media_prompt(ids, encoded)
    assert out["prompt_ids"].tolist() == list(built.prompt_ids)
    assert [tuple(g) for g in out["image_grids"].tolist()] == list(built.media.image_grids)
    assert out["video_grids"].shape == (0, 3) and out["embeds"].shape[0] == len(built.prompt_ids)
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(tiny_omni), num_blocks=64, text_part=THINKER_PART))
    engine.add_request("r", list(built.prompt_ids), SamplingParams(max_new_tokens=1), media=built.media)
    token = next(o.token_id for _ in range(64) for o in engine.step() if o.token_id is not None)
    assert out["token"].tolist() == [token]


def test_without_hooks_the_thinker_takes_no_media(tiny_omni):
    thinker = ThinkerComponent.from_checkpoint(str(tiny_omni), num_blocks=16, text_part=THINKER_PART)
    assert thinker.hook is None and not thinker.engine.config.return_embeddings
    with pytest.raises(InvalidArgument, match="open.node 'prefill_media': this checkpoint takes no media"):
        thinker.open(OpenNode("r", "prefill_media"), {"input_ids": torch.tensor([1, 2])})
    assert "embeds" not in _prefill(thinker, "prefill", {"input_ids": torch.tensor([1, 2, 3])})


def test_a_text_checkpoint_has_no_thinker_hook(tmp_path):
    from engine.checkpoints.tiny_text import make_tiny

    checkpoint = str(make_tiny("qwen3", tmp_path / "ckpt", num_hidden_layers=1))
    assert thinker_hook(checkpoint, hooks_for("thinker")) is None


def test_a_hooks_bad_specifics_are_named():
    with pytest.raises(InvalidArgument, match=r"ThinkerHook.engine_options \['talk_louder'\]"):
        ThinkerHook({"talk_louder": True})
    from engine.prompt_media import PromptMedia

    media = PromptMedia(torch.zeros(3, 2, dtype=torch.int64), 0, torch.zeros(0, dtype=torch.int64), torch.zeros(0, 4))
    with pytest.raises(InvalidArgument, match=r"MediaPrompt.outputs \['token'\]"):
        MediaPrompt((1, 2), media, {"token": torch.zeros(1)})
    with pytest.raises(InvalidArgument, match="MediaPrompt.prompt_ids has 3 ids"):
        MediaPrompt((1, 2, 3), media)
