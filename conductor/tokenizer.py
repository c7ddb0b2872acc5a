"""A model's own tokenizer, loaded once per model from its checkpoint directory.

Never a hub id: nothing is downloaded (local_files_only), so a conductor without
network access starts the same way."""
from __future__ import annotations

from pathlib import Path

from core.errors import GraphError


def load_tokenizer(model: str, directory: str):
    """transformers' AutoTokenizer of `directory`; GraphError naming the model otherwise."""
    from transformers import AutoTokenizer

    if not Path(directory).is_dir():
        raise GraphError(f"model {model}: tokenizer directory {directory} does not exist")
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as e:
        first_line = (str(e).splitlines() or [type(e).__name__])[0]
        raise GraphError(f"model {model}: no tokenizer in {directory}: {first_line}") from None
