"""Tiny random checkpoints, built once per session with transformers' own classes."""
from __future__ import annotations

import pytest

from engine.checkpoints.tiny_text import make_tiny
from tests.engine.models.cases import PARITY_CASES, TINY_MODELS


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """case name -> (family, checkpoint dir), built on first use."""
    root = tmp_path_factory.mktemp("tiny")
    built = {}

    def get(case: str):
        if case not in built:
            family, overrides = PARITY_CASES[case]
            built[case] = (family, make_tiny(TINY_MODELS.get(family, family), root / case, **overrides))
        return built[case]

    return get
