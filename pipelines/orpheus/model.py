"""The Orpheus model as the conductor serves it: the walk graph plus a placement (the LM
service runs prefill, decode and codes; the codec service runs snac)."""
from __future__ import annotations

from conductor.model import ServedModel
from conductor.placement import Placement
from engine.models.orpheus import SAMPLE_RATE, VOICES
from pipelines.orpheus.graph import INNER_LOOPS, OUTPUT_KINDS, orpheus_graph
from pipelines.orpheus.params import OrpheusParams
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
                       decode_text=False, prompt=OrpheusPrompt(), voice_param="voice", voices=VOICES)
