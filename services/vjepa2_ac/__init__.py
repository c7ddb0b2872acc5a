"""The world-model service (V-JEPA 2-AC): encoder, KV-cached rollouts and CEM planning."""
