"""Media parts in any order and number, in-process, against transformers on the tiny
checkpoint (fp32): an image, text, a clip and a second image, and an image with a video,
rendered by the chat template (one placeholder per part), encoded by Qwen3-Omni's towers
(its encoder hook), widened and spliced by its thinker hook, then run by the in-process
runner, give generate(return_audio=True)'s text ids, codec codes and waveform. The hook
refuses parts that disagree with the placeholders, naming the field."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.media_features import MediaFeatures
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from services.qwen3_omni.thinker_hook import thinker_hook
from tests.engine.models.test_omni_media import png_bytes, sine, wav_bytes
from tests.pipelines.omni_parts import encode_parts, reference_kwargs, template_ids, towers
from tests.pipelines.omni_reference import OmniReference
from tests.pipelines.test_omni_video import gif_bytes

CONTENT = {
    "image_text_audio_image": [("image", png_bytes(56, 42, seed=1)), "Compare this ",
                               ("audio", wav_bytes(sine(220, 1.0, 16000))), ("image", png_bytes(28, 28, seed=3))],
    "image_video": [("image", png_bytes(28, 28, seed=2)), ("video", gif_bytes(6)), "What changed?"],
}


@pytest.fixture(scope="module")
def parts(tiny_omni):
    return {"towers": towers(tiny_omni), "hook": thinker_hook(str(tiny_omni)),
            "features": MediaFeatures.from_checkpoint(tiny_omni)}


@pytest.mark.parametrize("case", list(CONTENT))
def test_parts_in_any_order_match_transformers(tiny_omni, parts, case):
    content = CONTENT[case]
    ids = template_ids(tiny_omni, content)
    built = parts["hook"].media_prompt(ids, encode_parts(tiny_omni, content, parts["towers"]))
    assert len(built.prompt_ids) > len(ids)  # each placeholder widened to its part's rows
    ref = OmniReference(tiny_omni).generate(list(built.prompt_ids), 16, 40,
                                            **reference_kwargs(parts["features"], content))
    runner = SpeechRunner.from_checkpoint(str(tiny_omni))
    ours = runner.generate([SpeechRequest(case, built.prompt_ids, max_text_tokens=16, max_frames=40,
                                          media=built.media)])[0]
    assert ours.text_ids == ref["text_ids"]
    assert torch.equal(ours.codes, ref["codes"])
    torch.testing.assert_close(ours.audio, ref["audio"], atol=1e-4, rtol=0)


def test_parts_that_disagree_with_the_placeholders_are_named(tiny_omni, parts):
    content = CONTENT["image_video"]
    ids = template_ids(tiny_omni, content)
    swapped = [content[1], content[0], content[2]]  # the video's rows where the image's placeholder is
    with pytest.raises(InvalidArgument, match=r"open.inputs\[input_ids\]: media placeholder 0 stands for image, "
                                              r"but media part 0 is video"):
        parts["hook"].media_prompt(ids, encode_parts(tiny_omni, swapped, parts["towers"]))
    with pytest.raises(InvalidArgument, match=r"more media placeholders than media parts \(1\)"):
        parts["hook"].media_prompt(ids, encode_parts(tiny_omni, content[:1], parts["towers"]))
    with pytest.raises(InvalidArgument, match=r"1 media placeholders for 2 media parts"):
        parts["hook"].media_prompt(template_ids(tiny_omni, content[:1]), encode_parts(tiny_omni, content,
                                                                                      parts["towers"]))
