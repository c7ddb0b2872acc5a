"""What the CLI asks of a served model beyond ListModels, through its registry entry
(cluster/registry.py): a client-side prompt (`speak --tokenizer`), the params a request
starts from, and an in-process run (`imagine --checkpoint`). A name the registry does not
know (a deployment may serve a model under another name) gets a chat prompt and no preset.
"""
from __future__ import annotations

import argparse

from cluster import registry
from core.errors import GraphError, InvalidArgument


def _entry(model: str | None) -> registry.ModelEntry | None:
    try:
        return registry.entry(model or "")
    except GraphError:
        return None


def client_prompt_ids(args: argparse.Namespace) -> list[int]:
    """--text (in --voice) as prompt ids, tokenized here by --tokenizer's checkpoint;
    ValueError naming the options."""
    entry = _entry(args.model)
    path = entry.client_prompt if entry is not None and entry.client_prompt else registry.CHAT_PROMPT
    voice = getattr(args, "voice", None)
    try:
        return registry.load(path)(args.tokenizer, args.text, voice)
    except InvalidArgument as e:
        raise ValueError(f"{'--text/--voice/--tokenizer' if voice else '--tokenizer'}: {e}") from None


def preset_params(args: argparse.Namespace) -> dict:
    """The params the model's request starts from (the options given then override them)."""
    entry = _entry(args.model)
    if entry is None or entry.client_preset is None:
        return {}
    client_tokenizes = getattr(args, "text", None) is None or bool(getattr(args, "tokenizer", None))
    return dict(registry.load(entry.client_preset)(getattr(args, "voice", None), client_tokenizes))


def local_run(model: str | None, checkpoint: str, name: str):
    """(graph, components, inner loops) of registered `model` (None: the first registered
    model that can) at `checkpoint`, every node in this process; ValueError naming --model
    when the model cannot run that way."""
    runnable = [e.name for e in registry.MODELS if e.in_process]
    entry = _entry(model if model is not None else next(iter(runnable), None))
    if entry is None or entry.in_process is None:
        raise ValueError(f"--model {model!r}: --checkpoint runs a model in this process, which only "
                         f"{runnable} can")
    graph_path, components_path = entry.in_process
    graph, loops = registry.load(graph_path)(name)
    return graph, registry.load(components_path)(checkpoint), loops
