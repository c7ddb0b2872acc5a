"""engine/models/qwen3_omni: the Qwen3-Omni talker, code predictor and code2wav.

SAMPLE_RATE: code2wav's audio, samples per second (12.5 codec frames per second, 1920
samples per frame); every reader of the model's audio takes it from here."""

SAMPLE_RATE = 24000
FRAME_SAMPLES = 1920
