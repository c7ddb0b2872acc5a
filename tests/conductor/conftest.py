"""Fixtures of the front door's tests: the tiny Qwen3-Omni tokenizer (its chat template
and vocabulary), loaded once."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from engine.models.qwen3_omni.tiny import write_omni_tokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_omni_tokenizer(directory)
    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
