"""The thinker service: a transformer backbone on the KV-cache engine (prefill + decode)."""
