"""The conductor records which media parts a kept context was built from and tells a
request continuing it which of its parts that context holds (the `held_media` walk input,
core/held_media.py); BAGEL's graph then edits a held image without running the ViT."""
from __future__ import annotations

import hashlib

import torch

from conductor.kept_contexts import KeptContexts, media_digests
from core.context_use import ContextUse, new_context_id
from core.held_media import HELD_MEDIA, is_held
from pipelines.bagel.model import bagel_graph
from services.encoder.media_list import pack_media
from transport.codec import inline_ref


def _media(*files: bytes, inline: bool = False) -> dict:
    """Walk inputs of image parts (tensors as the conductor makes them, or a client's inline refs)."""
    packed = pack_media([("image", data) for data in files])
    inputs = {"prompt": (torch.zeros(1, dtype=torch.uint8),), **{k: (v,) for k, v in packed.items()}}
    if inline:
        inputs = {k: (inline_ref(v[0]),) for k, v in inputs.items()}
    return inputs


def _kept(contexts: KeptContexts, inputs: dict, read: str = "") -> str:
    """A request on `inputs` (continuing `read`) that keeps its context; -> the id kept."""
    keep = new_context_id()
    report: dict = {}
    contexts.with_held_media(inputs, (ContextUse(read, keep, "o"),), report)
    contexts.end({**report, "context_id": keep, "holders": {"prefill_und": "bagel"}})
    return keep


def test_a_continued_context_says_which_of_a_requests_parts_it_holds():
    contexts = KeptContexts()
    fox, lake = b"\x89PNG fox", b"\x89PNG lake"
    first = _kept(contexts, _media(fox))
    assert contexts.directory.media(first) == {hashlib.sha256(fox).hexdigest()}
    assert contexts.directory.holders(first) == {"bagel"}
    for inline in (False, True):  # the conductor's own tensors, a client's inline refs
        inputs = _media(lake, fox, inline=inline)
        assert media_digests(inputs) == [hashlib.sha256(d).hexdigest() for d in (lake, fox)]
        marked = contexts.with_held_media(inputs, (ContextUse(first, "", "o"),), {})
        assert marked[HELD_MEDIA][0].tolist() == [0, 1] and not is_held(marked)
    alone = _media(fox)
    assert is_held(contexts.with_held_media(alone, (ContextUse(first, "", "o"),), {}))
    assert HELD_MEDIA not in contexts.with_held_media(_media(lake), (ContextUse(first, "", "o"),), {})
    assert contexts.with_held_media(alone, (), {}) is alone  # no context named: nothing read
    second = _kept(contexts, _media(lake), read=first)  # a kept follow-up holds both
    assert contexts.directory.media(second) == {hashlib.sha256(d).hexdigest() for d in (fox, lake)}


def test_bagel_edits_a_held_image_without_the_vit():
    graph = bagel_graph()
    held = {**_media(b"x"), HELD_MEDIA: (torch.ones(1, dtype=torch.int64),)}
    assert graph.start(held) == "edit_held" and graph.start(_media(b"x")) == "edit"
    assert graph.start(held, frozenset({"text"})) == "understand"  # text wanted: the ViT reads it anyway
    assert "media_encoder" not in graph.walk_by_name["edit_held"].node_names
    assert HELD_MEDIA not in graph.walk_by_name["edit_held"].input_names  # no client can send it
