"""The codec service: Qwen3-Omni's code2wav (codec codes -> waveform) on the stateless engine."""
