"""`starmesh serve codec --checkpoint DIR`: the codec components a checkpoint holds.

The codec service is shared: which codec a checkpoint has (a neural audio codec's
decoder for one model, a codec-code vocoder for another) is the models' business, told by
their codec hooks (services/model_hooks.py). Each hook takes (checkpoint, **options) and
returns a stateless component serving its codec node, or None when the checkpoint has no
codec of its model. One match is served alone; a directory holding several codecs serves
them all, co-located in one process.
"""
from __future__ import annotations

from core.errors import InvalidArgument
from services.model_hooks import hook_results


def codec_from_checkpoint(checkpoint: str, dtype: str | None = None, device: str = "cpu",
                          max_batch_size: int | None = None, max_queued: int = 1024, schedule: str = "deadline",
                          max_batch_frames: int | None = None, hooks: tuple[str, ...] = ()):
    """dtype, max_batch_size, max_batch_frames: None is each codec's default (an option left
    None is not passed to its hook)."""
    given = dict(dtype=dtype, device=device, max_batch_size=max_batch_size, max_queued=max_queued,
                 schedule=schedule, max_batch_frames=max_batch_frames)
    options = {name: value for name, value in given.items() if value is not None}
    components = hook_results(hooks, checkpoint, **options)
    if not components:
        raise InvalidArgument(f"checkpoint {checkpoint}: no codec any registered model's hook recognises "
                              f"(hooks: {list(hooks) or 'none given'})")
    if len(components) == 1:
        return components[0]
    from runtime.colocated import Colocated

    return Colocated(components, name="codec")
