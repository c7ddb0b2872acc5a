"""engine/models/snac: the SNAC neural audio codec's decoder (codes -> audio), loaded from
safetensors, with noise drawn from per-window generators (decoder.py)."""
