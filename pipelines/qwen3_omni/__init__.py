"""Qwen3-Omni speech: thinker -> talker -> code2wav (DESIGN 5; notes 5 and 9.1)."""
