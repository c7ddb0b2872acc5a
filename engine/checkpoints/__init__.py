"""engine/checkpoints."""
