"""A speech request's params: the thinker's (TextParams: max_new_tokens, temperature, ...),
the talker's (TalkerParams: max_frames, speaker, talker_temperature, ...) and the
request's own first code2wav window (first_chunk), all keys of one flat dict."""
from __future__ import annotations

from dataclasses import dataclass

from core.params import RequestParams, group, param
from engine.models.qwen3_omni.params import TalkerParams
from engine.sampling_params import TextParams


@dataclass(frozen=True)
class SpeechParams(RequestParams):
    text: TextParams = group(TextParams)
    talker: TalkerParams = group(TalkerParams)
    first_chunk: int | None = param(None, kind=int, min=0,
                                    help="frames of the first code2wav window (default: the deployment's)")
