"""The thinker engine with audio and images in its prompt equals transformers' thinker
(greedy ids, the talker's captured layer at media positions); a text prompt through the
multimodal rope path is bit-identical to today's 1-D path; a media request batched with a
text request gets its solo ids."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.tiny import TOKENS, chat_prompt, media_chat_prompt
from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.qwen3_omni.encoder_loader import load_audio_encoder, load_vision_encoder
from engine.models.qwen3_omni.media_features import MediaFeatures
from engine.models.qwen3_omni.media_prompt import ImageRows, build_prompt_media, media_tokens_from_hf
from engine.models.loader import _read_json
from engine.prompt_media import PromptMedia
from engine.sampling_params import SamplingParams
from engine.models.qwen3_omni import THINKER_PART

MAX_NEW = 12


class Media:
    """The tiny checkpoint's processors and towers, and transformers' thinker."""

    def __init__(self, checkpoint) -> None:
        import transformers as tf

        self.checkpoint = checkpoint
        self.features = MediaFeatures.from_checkpoint(checkpoint)
        self.audio = load_audio_encoder(checkpoint)
        self.vision = load_vision_encoder(checkpoint)
        self.tokens = media_tokens_from_hf(_read_json(checkpoint / "config.json"))
        self.hf = tf.Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(
            str(checkpoint), dtype=torch.float32).eval()

    def inputs(self, seconds: float | None, image_size: tuple[int, int] | None, text: str = "What is it?"):
        """(prompt ids, PromptMedia, transformers' kwargs) for a clip and/or an image."""
        from PIL import Image

        audio, images, kwargs = [], [], {}
        if seconds is not None:
            t = np.arange(int(seconds * 16000)) / 16000
            samples = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.5 * t)).astype(np.float32)
            mel = self.features.audio_samples(samples, "audio")
            audio = self.audio([mel])
            kwargs.update(input_features=mel[None], feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long))
        if image_size is not None:
            pixels_np = np.random.default_rng(1).integers(0, 256, (*image_size[::-1], 3), dtype=np.uint8)
            pixels, grid = self.features.image_pil(Image.fromarray(pixels_np))
            out = self.vision(pixels, [grid])
            images = [ImageRows(out.embeds[0], out.deepstack[0], grid)]
            kwargs.update(pixel_values=pixels, image_grid_thw=torch.tensor([grid]))
        ids = media_chat_prompt(text, tuple(a.shape[0] for a in audio), tuple(len(i.embeds) for i in images))
        return ids, build_prompt_media(ids, self.tokens, audio, images), kwargs

    def reference(self, ids, kwargs) -> tuple[list[int], torch.Tensor]:
        """transformers' greedy ids and its layer-1 hidden states of the prompt [n, hidden]."""
        input_ids = torch.tensor([ids])
        out = self.hf.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=MAX_NEW,
                               do_sample=False, eos_token_id=TOKENS["<|im_end|>"], output_hidden_states=True,
                               return_dict_in_generate=True, **kwargs)
        return out.sequences[0, len(ids):].tolist(), out.hidden_states[0][1][0]


@pytest.fixture(scope="module")
def media(tiny_omni):
    return Media(tiny_omni)


def _engine(checkpoint) -> LLMEngine:
    return LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(checkpoint), text_part=THINKER_PART, num_blocks=64, block_size=16,
                                                  capture_layer=1))


def _run(engine: LLMEngine, requests: dict) -> dict:
    """request id -> (output ids, captured prompt hidden [n, hidden])."""
    params = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, eos_token_ids=(TOKENS["<|im_end|>"],))
    for rid, (ids, media) in requests.items():
        engine.add_request(rid, ids, params, media=media)
    hidden, done = {rid: [] for rid in requests}, {}
    while engine.has_work():
        for o in engine.step():
            hidden[o.request_id].append(o.hidden)  # prefill chunks first: the prompt's rows lead
            if o.is_finished:
                done[o.request_id] = o.output_ids
    return {rid: (done[rid], torch.cat(hidden[rid])[:len(requests[rid][0])]) for rid in requests}


CASES = {"audio": (5.0, None), "image": (None, (224, 224)), "both": (1.3, (96, 160))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_media_prompts_match_transformers(case, media, tiny_omni):
    ids, prompt_media, kwargs = media.inputs(*CASES[case])
    ref_ids, ref_hidden = media.reference(ids, kwargs)
    (ours, hidden), = _run(_engine(tiny_omni), {case: (ids, prompt_media)}).values()
    assert ours == ref_ids
    torch.testing.assert_close(hidden, ref_hidden, atol=1e-5, rtol=0)


def test_image_positions_are_three_dimensional(media):
    ids, prompt_media, _ = media.inputs(None, (224, 224))
    first = ids.index(TOKENS["<|image_pad|>"])
    block = prompt_media.positions[:, first:first + 49]
    assert block[0].unique().tolist() == [first]                # one frame
    assert block[1].unique().tolist() == list(range(first, first + 7))  # 7 x 7 merged grid
    assert prompt_media.delta == 7 - 49


def test_text_prompt_through_the_media_path_is_bit_identical(tiny_omni):
    ids = chat_prompt("Hello there")
    n = len(ids)
    text_media = PromptMedia(torch.arange(n).expand(3, -1).clone(), 0, torch.tensor([1]),
                             _engine(tiny_omni).model.embed(torch.tensor([ids[1]])))
    engine = _engine(tiny_omni)
    plain = _run(engine, {"plain": (ids, None)})["plain"]
    via_media = _run(engine, {"media": (ids, text_media)})["media"]
    assert plain[0] == via_media[0]
    assert torch.equal(plain[1], via_media[1])


def test_media_batched_with_text_gets_its_solo_ids(media, tiny_omni):
    ids, prompt_media, _ = media.inputs(1.3, (96, 160))
    engine = _engine(tiny_omni)
    solo = _run(engine, {"m": (ids, prompt_media)})["m"][0]
    text_solo = _run(engine, {"t": (chat_prompt("Hi"), None)})["t"][0]
    both = _run(engine, {"m": (ids, prompt_media), "t": (chat_prompt("Hi"), None)})
    assert both["m"][0] == solo and both["t"][0] == text_solo


def test_mismatched_media_is_invalid_argument(media, tiny_omni):
    ids, prompt_media, _ = media.inputs(1.0, None)
    with pytest.raises(InvalidArgument, match="audio placeholder runs"):
        build_prompt_media(ids[:-20] + ids[-5:], media.tokens, [prompt_media.rows], [])
    with pytest.raises(InvalidArgument, match="media positions"):
        _engine(tiny_omni).add_request("x", ids[:-1], SamplingParams(max_new_tokens=2), media=prompt_media)
