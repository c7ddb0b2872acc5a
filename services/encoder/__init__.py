"""The encoder service: Qwen3-Omni's audio and vision towers (raw media -> thinker rows) on the stateless engine."""
