"""An Orpheus request's params: the LM's (TextParams: max_new_tokens, temperature, top_p,
repetition_penalty, seed, ...). `seed` also seeds each SNAC window's noise.

RECOMMENDED holds the released model's sampling defaults and its stop id: every request
starts from them (the served model's default_params; ListModels shows them)."""
from __future__ import annotations

from dataclasses import dataclass

from core.params import RequestParams, group, param
from engine.models.orpheus import DEFAULT_REPETITION_PENALTY, DEFAULT_TEMPERATURE, DEFAULT_TOP_P, END_OF_SPEECH
from engine.sampling_params import TextParams

RECOMMENDED = {"temperature": DEFAULT_TEMPERATURE, "top_p": DEFAULT_TOP_P,
               "repetition_penalty": DEFAULT_REPETITION_PENALTY, "stop_token_ids": [END_OF_SPEECH],
               "max_new_tokens": 1200}


@dataclass(frozen=True)
class OrpheusParams(RequestParams):
    text: TextParams = group(TextParams)
    voice: str = param("tara", help="the voice of a text request's prompt (tara, zoe, zac, jess, leo, mia, "
                                    "julia, leah)")


def client_prompt_ids(tokenizer_dir: str, text: str, voice: str | None = None) -> list[int]:
    """A client's own speech prompt (`starmesh speak --tokenizer`): `text` in `voice`
    (default: the first voice), tokenized by the checkpoint's tokenizer."""
    from engine.models.orpheus import VOICES
    from engine.models.orpheus.prompt import speech_prompt_ids

    return speech_prompt_ids(tokenizer_dir, text, voice or VOICES[0])


def client_preset(voice: str | None, client_tokenizes: bool) -> dict:
    """The params a client's request starts from: the released sampling defaults, and the
    voice when the conductor builds the speech prompt (the options given override them)."""
    from engine.models.orpheus import VOICES

    return {**RECOMMENDED, **({} if client_tokenizes else {"voice": voice or VOICES[0]})}
