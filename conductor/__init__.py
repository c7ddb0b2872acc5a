"""Conductor service: request state, walk executor, placement, routing, front door."""
