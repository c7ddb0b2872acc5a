"""The in-process thinker -> talker -> code2wav runner given a spoken question equals
transformers' Qwen3-Omni generate(return_audio=True) on the tiny checkpoint: same text ids,
same codec codes, waveform allclose (fp32). The talker reads hidden_projection rows at
the audio positions, as transformers' does."""
from __future__ import annotations

import pytest
import torch

from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from tests.engine.test_prompt_media import Media
from tests.pipelines.omni_reference import OmniReference


@pytest.fixture(scope="module")
def media(tiny_omni):
    return Media(tiny_omni)


@pytest.mark.parametrize("seconds, image_size, text", [(5.0, None, ""), (None, (56, 42), "What is it?"),
                                                       (2.0, (28, 28), "And this?")], ids=["audio", "image", "both"])
def test_media_question_matches_transformers(media, tiny_omni, seconds, image_size, text):
    ids, prompt_media, kwargs = media.inputs(seconds, image_size, text=text)
    ref = OmniReference(tiny_omni).generate(ids, 16, 40, **kwargs)
    runner = SpeechRunner.from_checkpoint(str(tiny_omni))
    ours = runner.generate([SpeechRequest("spoken", ids, max_text_tokens=16, max_frames=40, chunk_size=300,
                                          left_context=25, media=prompt_media)])[0]
    assert ours.text_ids == ref["text_ids"]
    assert torch.equal(ours.codes, ref["codes"])
    torch.testing.assert_close(ours.audio, ref["audio"], atol=1e-4, rtol=0)
