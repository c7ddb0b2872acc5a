"""What a model may customise in the shared LLM component (services/thinker), through the
thinker hook it registers (cluster/registry.py: `hooks={"thinker": "module:callable"}`).

A hook is called with the checkpoint directory and returns a ThinkerHook when the
checkpoint is its model's, else None; the component uses the first hook that answers.

- engine_options: EngineConfig fields a downstream consumer of the thinker needs (a
  talker reading every token's input embedding and one layer's hidden states:
  {"return_embeddings": True, "capture_layer": k}); a service's own options win.
- media_prompt: how node `prefill_media`'s inputs become the prompt the engine runs:
  (prompt ids [P], the run's other inputs by port) -> MediaPrompt: the ids widened to the
  media rows, the rows spliced at their positions with the rope ids (PromptMedia), and
  the extra outputs the prefill sends with its first token (e.g. the widened ids and
  the media grids a talker's rope needs). None: the model takes no media.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Mapping

import torch

from core.errors import InvalidArgument
from engine.engine_config import EngineConfig
from engine.prompt_media import PromptMedia

ROW_OUTPUTS = ("token", "hidden", "embeds")  # what every prefill sends; a hook's outputs add to them


@dataclass(frozen=True)
class MediaPrompt:
    prompt_ids: tuple[int, ...]                  # [P'] the prompt with each placeholder widened to its rows
    media: PromptMedia                           # rows at prompt positions, rope ids
    outputs: Mapping[str, torch.Tensor] = field(default_factory=dict)  # port -> tensor, with the first token

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))
        if len(self.prompt_ids) != self.media.num_prompt:
            raise InvalidArgument(f"MediaPrompt.prompt_ids has {len(self.prompt_ids)} ids, its media "
                                  f"{self.media.num_prompt} positions")
        taken = sorted(set(self.outputs) & set(ROW_OUTPUTS))
        if taken:
            raise InvalidArgument(f"MediaPrompt.outputs {taken}: names of the prefill's own outputs")
        object.__setattr__(self, "outputs", MappingProxyType(dict(self.outputs)))


MediaPromptFn = Callable[[list[int], Mapping[str, torch.Tensor]], MediaPrompt]


@dataclass(frozen=True)
class ThinkerHook:
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    media_prompt: MediaPromptFn | None = None

    def __post_init__(self) -> None:
        known = {f.name for f in fields(EngineConfig)}
        unknown = sorted(set(self.engine_options) - known)
        if unknown:
            raise InvalidArgument(f"ThinkerHook.engine_options {unknown}: not EngineConfig fields")
        object.__setattr__(self, "engine_options", MappingProxyType(dict(self.engine_options)))


def thinker_hook(checkpoint: str, hooks: tuple[str, ...] = ()) -> ThinkerHook | None:
    """The first of `hooks` ("module:callable" paths) that answers for `checkpoint`; None
    when none does (a plain text model)."""
    from services.model_hooks import first_hook

    return first_hook(hooks, checkpoint, ThinkerHook, "thinker")
