"""What the Qwen3-Omni talker is, read from a checkpoint's config.json.

`TalkerSpec` holds the talker decoder's ModelConfig (a Qwen3-MoE with a shared expert,
tensors under `talker.`), the code predictor's (a dense Qwen3, under
`talker.code_predictor.`), the codec special ids, the speakers, and the thinker-side
token ids the talker's prompt is built from (chat roles, tts markers, multimodal ids).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.model_config import ModelConfig, model_config_from_hf
from engine.models.qwen3_omni.media_prompt import MediaTokens
from core.errors import InvalidArgument

CODEC_FIELDS = ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_nothink_id", "codec_think_bos_id",
                "codec_think_eos_id")
TOKEN_FIELDS = ("im_start_token_id", "system_token_id", "user_token_id", "assistant_token_id", "tts_pad_token_id",
                "tts_bos_token_id", "tts_eos_token_id")
MULTIMODAL_FIELDS = ("audio_token_id", "image_token_id", "video_token_id")


@dataclass(frozen=True)
class TalkerSpec:
    decoder: ModelConfig          # the MoE decoder that samples code group 0
    predictor: ModelConfig        # the dense model that fills groups 1..G-1 of each frame
    num_code_groups: int
    thinker_hidden_size: int
    accept_hidden_layer: int      # the thinker layer whose states condition multimodal positions
    codec: dict                   # CODEC_FIELDS -> id
    speakers: dict                # lower-case name -> codec id
    tokens: dict                  # TOKEN_FIELDS -> thinker vocabulary id
    multimodal_ids: tuple[int, ...]
    media: MediaTokens            # the talker's own image rope (its config's merge size and time scale)

    def __post_init__(self) -> None:
        if self.num_code_groups < 2:
            raise InvalidArgument(f"talker num_code_groups must be >= 2, got {self.num_code_groups}")
        if self.predictor.hidden_size != self.decoder.hidden_size:
            raise InvalidArgument(f"code predictor hidden_size {self.predictor.hidden_size} != talker "
                                  f"hidden_size {self.decoder.hidden_size}")
        if self.decoder.vocab_size <= 1024:
            raise InvalidArgument("talker vocab_size must exceed 1024 (codec special ids sit in its top 1024)")
        bad = {k: v for k, v in {**self.codec, **self.speakers}.items() if not 0 <= v < self.decoder.vocab_size}
        if bad:
            raise InvalidArgument(f"talker codec ids outside the vocabulary: {bad}")

    @property
    def codebook_size(self) -> int:
        """Codes of group 0 are the ids below the top 1024; groups 1.. use the predictor's vocab."""
        return self.predictor.vocab_size

    @property
    def suppressed_ids(self) -> tuple[int, ...]:
        """What HF's generate suppresses: the top 1024 ids except codec EOS."""
        vocab, eos = self.decoder.vocab_size, self.codec["codec_eos_token_id"]
        return tuple(i for i in range(vocab - 1024, vocab) if i != eos)

    def speaker_id(self, name: str) -> int:
        try:
            return self.speakers[name.lower()]
        except KeyError:
            raise InvalidArgument(f"speaker {name!r} is unknown (have {sorted(self.speakers)})") from None


def _sub(cfg: dict, key: str, where: str) -> dict:
    value = cfg.get(key)
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}: missing {key}")
    return value


def _ids(cfg: dict, fields: tuple[str, ...], where: str) -> dict:
    missing = [f for f in fields if f not in cfg]
    if missing:
        raise InvalidArgument(f"{where}: missing {missing}")
    return {f: int(cfg[f]) for f in fields}


def talker_spec_from_hf(cfg: dict, dtype: str | None = None, where: str = "config.json") -> TalkerSpec:
    """The TalkerSpec of a Qwen3-Omni config.json dict (model_type qwen3_omni_moe)."""
    if cfg.get("model_type") != "qwen3_omni_moe" or not cfg.get("enable_audio_output", True):
        raise InvalidArgument(f"{where}: not a Qwen3-Omni checkpoint with audio output (talker)")
    talker = _sub(cfg, "talker_config", where)
    text = _sub(talker, "text_config", f"{where} talker_config")
    predictor = _sub(talker, "code_predictor_config", f"{where} talker_config")
    decoder = model_config_from_hf({**text, "model_type": "qwen3_moe"}, dtype, where=f"{where} talker_config")
    # HF's talker layers are all sparse MoE with a shared expert, whatever mlp_only_layers says.
    decoder = dataclasses.replace(decoder, weight_prefix="talker.", mlp_only_layers=(), decoder_sparse_step=1,
                                  tie_word_embeddings=bool(talker.get("tie_word_embeddings", False)))
    pred = model_config_from_hf({**predictor, "model_type": "qwen3"}, dtype or decoder.dtype,
                                where=f"{where} code_predictor_config")
    pred = dataclasses.replace(pred, weight_prefix="talker.code_predictor.")
    thinker = cfg.get("thinker_config") or {}
    multimodal = tuple(int(thinker.get(f, talker.get(f, -1))) for f in MULTIMODAL_FIELDS)
    try:
        return TalkerSpec(
            decoder=decoder, predictor=pred, num_code_groups=int(talker["num_code_groups"]),
            thinker_hidden_size=int(talker["thinker_hidden_size"]),
            accept_hidden_layer=int(talker["accept_hidden_layer"]), codec=_ids(talker, CODEC_FIELDS, where),
            speakers={str(k).lower(): int(v) for k, v in (talker.get("speaker_id") or {}).items()},
            tokens=_ids(cfg, TOKEN_FIELDS, where), multimodal_ids=multimodal,
            media=MediaTokens(multimodal[0], multimodal[1], int(talker.get("spatial_merge_size", 2)),
                              int(talker.get("position_id_per_seconds", 25)), multimodal[2]))
    except KeyError as e:
        raise InvalidArgument(f"{where}: talker_config lacks {e.args[0]!r}") from None
