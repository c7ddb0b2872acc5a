"""The Orpheus model as the conductor serves it: the walk graph plus a placement (the LM
service runs prefill, decode and codes; the codec service runs snac)."""
from __future__ import annotations

from core.input_spec import TOKEN_IDS
from conductor.model import ServedModel
from conductor.placement import Placement
from core.pace import NodePace
from engine.models.orpheus import SAMPLE_RATE, VOICES
from engine.models.orpheus.audio_codes import CODES_PER_FRAME
from engine.models.orpheus.windows import EMIT_END, EMIT_START, STRIDE_CODES, WINDOW_CODES
from pipelines.orpheus.graph import INNER_LOOPS, OUTPUT_KINDS, orpheus_graph
from pipelines.orpheus.params import RECOMMENDED, OrpheusParams
from pipelines.orpheus.prompt_format import OrpheusPrompt


def orpheus_placement(lm: list[str], codec: list[str]) -> Placement:
    return Placement.from_dict({
        "services": {"lm": {"replicas": lm}, "codec": {"replicas": codec}},
        "placement": {"prefill": "lm", "decode": "lm", "codes": "lm", "snac": "codec"},
        "kv_contexts": {"lm": ["prefill", "decode"]}})


def orpheus_model(name: str, placement: Placement, max_new_tokens: int = 8192) -> ServedModel:
    # Its text outputs are audio tokens: the tokenizer only formats prompts (voice + text).
    return ServedModel(name, orpheus_graph(max_new_tokens, name=name), placement, INNER_LOOPS, params=OrpheusParams,
                       output_kinds=OUTPUT_KINDS, sample_rate=SAMPLE_RATE, tokenizer_node="prefill",
                       decode_text=False, prompt=OrpheusPrompt(), voice_param="voice", voices=VOICES,
                       pacing=orpheus_pacing(), default_params=RECOMMENDED, input_specs={"input_ids": TOKEN_IDS})


def orpheus_pacing() -> dict[str, NodePace]:
    """An LM token is (at most) one SNAC code, 1/7 of a frame of EMIT_END - EMIT_START samples.
    The LM and the codes node work a window (28 codes) ahead: a code plays only once the
    window holding it is complete. A snac window's audio starts where its new codes' frame
    is minus the 3 frames of context before them (the reference emits the second frame of
    each window), so its first new code, at 21 + 7k, is due at 7k codes."""
    code_s = (EMIT_END - EMIT_START) / SAMPLE_RATE / CODES_PER_FRAME  # ~12.2 ms of audio per code
    ahead = NodePace(code_s, WINDOW_CODES)
    return {"prefill": ahead, "decode": ahead, "codes": ahead,
            "snac": NodePace(code_s, WINDOW_CODES - STRIDE_CODES)}
