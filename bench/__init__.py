"""Benchmarks: figures are printed and written as JSON, never asserted in tests."""
