"""engine/models/qwen3_omni."""
