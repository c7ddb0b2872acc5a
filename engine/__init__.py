"""Engines: KV pool, scheduler, sampler, attention backends, offload."""
