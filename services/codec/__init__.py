"""The codec service: codec codes -> waveform on the stateless engine, for whichever models' codecs
a checkpoint holds (their codec hooks)."""
