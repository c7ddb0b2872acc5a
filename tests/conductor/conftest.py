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


@pytest.fixture(scope="package")
def session_mesh(tiny_omni):
    """The tiny omni mesh behind a conductor with small session bounds (tests/conductor/session_mesh.py)."""
    from tests.conductor.session_mesh import session_mesh as start

    with start(tiny_omni) as mesh:
        yield mesh
