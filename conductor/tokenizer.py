"""A model's own tokenizer, loaded once per model from its checkpoint directory.

Never a hub id: nothing is downloaded (local_files_only), so a conductor without
network access starts the same way."""
from __future__ import annotations

import logging
from pathlib import Path

from core.errors import GraphError

log = logging.getLogger(__name__)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def load_tokenizer(model: str, directory: str):
    """transformers' AutoTokenizer of `directory`; None when the checkpoint ships no
    tokenizer (the model then takes ids and sends ids back); GraphError naming the model
    when its tokenizer cannot be read."""
    from transformers import AutoTokenizer

    if not Path(directory).is_dir():
        raise GraphError(f"model {model}: tokenizer directory {directory} does not exist")
    if not any((Path(directory) / name).is_file() for name in TOKENIZER_FILES):
        log.warning("model %s: checkpoint %s has no tokenizer: no text in, token ids out", model, directory)
        return None
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as e:
        first_line = (str(e).splitlines() or [type(e).__name__])[0]
        raise GraphError(f"model {model}: no tokenizer in {directory}: {first_line}") from None
