"""Orpheus TTS: a Llama that speaks through SNAC, streamed with a sliding window."""
