"""engine/models/orpheus: the Orpheus TTS layout around a Llama 3.2 language model.

The LM is a plain Llama (engine.models.llama) whose vocabulary extends Llama 3's 128,256
text ids with custom tokens: `<custom_token_N>` has id CUSTOM_TOKEN_BASE + N. Audio comes
out as custom tokens that carry SNAC codes (audio_codes.py); the prompt layout is in
prompt.py and the streaming window rule in windows.py. SAMPLE_RATE is SNAC 24 kHz's.
"""

SAMPLE_RATE = 24000
VOCAB_SIZE = 156_940
CUSTOM_TOKEN_BASE = 128_256        # id of <custom_token_0>
BEGIN_OF_TEXT = 128_000
END_OF_TEXT = 128_009
START_OF_HUMAN = 128_259
END_OF_HUMAN = 128_260
START_OF_AI = 128_261
START_OF_SPEECH = 128_257
END_OF_SPEECH = 128_258            # generation stops here
VOICES = ("tara", "zoe", "zac", "jess", "leo", "mia", "julia", "leah")
# The released model's sampling defaults.
DEFAULT_TEMPERATURE = 0.6
DEFAULT_TOP_P = 0.8
DEFAULT_REPETITION_PENALTY = 1.3
