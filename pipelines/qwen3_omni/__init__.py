"""Qwen3-Omni speech: thinker -> talker -> code2wav."""
