"""engine/models/qwen3_omni: the Qwen3-Omni talker, code predictor and code2wav (its thinker's
text model is a Qwen3-MoE of the engine's table, loaded from the checkpoint's THINKER_PART).

SAMPLE_RATE: code2wav's audio, samples per second (12.5 codec frames per second, 1920
samples per frame); every reader of the model's audio takes it from here."""

SAMPLE_RATE = 24000
FRAME_SAMPLES = 1920
THINKER_PART = "thinker"  # the checkpoint's part whose text model the LLM component serves
