"""Talker and code2wav in one service process (the paper's Qwen3-Omni layout: thinker
on one device, talker + code2wav on another). With a placement that puts both nodes on
this service, the conductor hands the talker -> code2wav edge over to the process
(runtime.colocated_streams): no conductor message per chunk on that edge."""
from __future__ import annotations


def make_talker_codec(checkpoint: str, dtype: str | None = None, max_batch_size: int | None = None,
                      max_batch_frames: int | None = None, **engine_options):
    """max_batch_size, max_batch_frames: code2wav's (None: its default); the rest: the talker's."""
    from services.qwen3_omni.code2wav import Code2WavComponent
    from runtime.colocated import Colocated
    from services.qwen3_omni.talker import TalkerComponent

    talker = TalkerComponent.from_checkpoint(checkpoint, dtype=dtype, **engine_options)
    codec = Code2WavComponent.from_checkpoint(checkpoint, dtype=dtype, max_batch_size=max_batch_size,
                                           schedule=engine_options.get("schedule", "deadline"),
                                           max_batch_frames=max_batch_frames)
    return Colocated([talker, codec], name="talker+codec")
