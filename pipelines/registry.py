"""Pipelines by name: what a deployment's `models.<name>.pipeline` builds.

A builder takes (model name, Placement, **options) and returns the conductor's
ServedModel; imports happen only when a deployment uses the pipeline.
"""
from __future__ import annotations

import importlib

from core.errors import GraphError

BUILDERS = {
    "qwen3_omni": "pipelines.qwen3_omni.model:speech_model",
    "text_to_image": "pipelines.registry:text_to_image_model",
    "text": "pipelines.text_generation:text_model",
    "orpheus": "pipelines.orpheus.model:orpheus_model",
    "world_model": "pipelines.world_model.model:world_model",
}


def build_model(pipeline: str, name: str, placement, options: dict):
    if pipeline not in BUILDERS:
        raise GraphError(f"pipeline {pipeline!r} is unknown (have {sorted(BUILDERS)})")
    module, _, attr = BUILDERS[pipeline].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)(name, placement, **options)
    except TypeError as e:  # an option the builder does not take
        raise GraphError(f"models.{name}.options: {e}") from None


def text_to_image_model(name: str, placement, fused: bool = False, max_steps: int | None = None):
    from pipelines.text_to_image import image_model, text_to_image_graph

    graph = text_to_image_graph(name, fused=fused, **({"max_steps": max_steps} if max_steps else {}))
    if fused and placement.lockstep_groups:  # the fused loop runs both branches on one replica
        raise GraphError(f"models.{name}.options.fused: the fused denoising loop cannot run on a dlo_group "
                         f"({sorted(placement.lockstep_groups)}), whose replicas step in lockstep")
    return image_model(name, graph, placement, fused)
