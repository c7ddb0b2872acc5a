"""The Orpheus LM service: the thinker (prefill, decode) plus the token -> code node."""
