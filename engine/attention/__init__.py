"""Attention backends over the paged KV cache: torch (CPU, fallback) and FlashInfer (CUDA)."""
