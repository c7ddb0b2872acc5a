"""Discovery and the offload plan: which blocks stream, where each parameter sits in a slot.

A model may declare its block stack with `offload_blocks() -> list[str]`: module paths
in execution order (several stacks may follow each other, e.g. code2wav's transformer
layers, then its decoder blocks). Otherwise discovery takes the largest (by parameter
bytes) nn.ModuleList whose children are at least two modules of one class with a
forward of their own: `model.layers` of every CausalLM, `pre_transformer.layers` of
Code2Wav, `transformer_blocks` of a diffusers DiT, `decoder.up_blocks` of a VAE.

Each streamed block's parameters are laid out back to back in one flat byte buffer,
every one at an ALIGN-byte offset; the two slots are sized for the largest block. The
first `resident_layers` blocks stay resident, as does everything outside the blocks
(embeddings, norms, heads, buffers). The digest covers the layout, so ranks that
gather blocks together can prove they agree on it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
from torch import nn

from core.errors import InvalidArgument

ALIGN = 256  # bytes: every parameter view starts at a multiple of this (CUDA-friendly)


@dataclass(frozen=True)
class ParamSlice:
    """One parameter's place in its block's flat layout."""

    name: str                 # full parameter name in the model, e.g. "model.layers.3.mlp.up_proj.weight"
    offset: int               # bytes from the start of the slot (a multiple of ALIGN)
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class BlockLayout:
    path: str                           # module path, e.g. "model.layers.3"
    params: tuple[ParamSlice, ...]
    nbytes: int                         # end of the last parameter (unaligned)


@dataclass(frozen=True)
class OffloadPlan:
    """blocks: streamed, in execution order. resident_blocks: leading blocks kept resident."""

    blocks: tuple[BlockLayout, ...]
    resident_blocks: tuple[str, ...]
    slot_bytes: int                     # max block nbytes rounded up to ALIGN
    digest: str                         # sha256 of the layout; ranks must agree

    @property
    def streamed_names(self) -> frozenset[str]:
        return frozenset(p.name for b in self.blocks for p in b.params)

    @property
    def streamed_bytes(self) -> int:
        return sum(b.nbytes for b in self.blocks)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _is_block(module: nn.Module) -> bool:
    return type(module).forward is not nn.Module.forward and not isinstance(module, (nn.ModuleList, nn.ModuleDict))


def _param_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def discover_blocks(model: nn.Module) -> list[str]:
    """Module paths of the streamed block stack, declared or discovered (module docstring)."""
    declared = getattr(model, "offload_blocks", None)
    if callable(declared):
        paths = list(declared())
        modules = dict(model.named_modules())
        missing = [p for p in paths if p not in modules]
        if missing or not paths:
            raise InvalidArgument(f"{type(model).__name__}.offload_blocks() names no module or unknown "
                                  f"modules: {missing or paths}")
        return paths
    best, best_bytes = None, 0
    for path, module in model.named_modules():
        children = list(module.children()) if isinstance(module, nn.ModuleList) else []
        if len(children) < 2 or len({type(c) for c in children}) != 1 or not _is_block(children[0]):
            continue
        size = _param_bytes(module)
        if size > best_bytes:
            best, best_bytes = path, size
    if best is None:
        raise InvalidArgument(f"{type(model).__name__}: no block stack (a ModuleList of two or more blocks of "
                              "one class) found; declare offload_blocks()")
    return [f"{best}.{i}" if best else str(i) for i in range(len(model.get_submodule(best)))]


def _layout(path: str, block: nn.Module) -> BlockLayout:
    params, offset = [], 0
    for local, param in block.named_parameters():
        nbytes = param.numel() * param.element_size()
        params.append(ParamSlice(f"{path}.{local}", offset, nbytes, param.dtype, tuple(param.shape)))
        offset = _aligned(offset + nbytes)
    end = params[-1].offset + params[-1].nbytes if params else 0
    return BlockLayout(path, tuple(params), end)


def _check_no_aliasing(model: nn.Module, streamed: frozenset[str]) -> None:
    """A streamed parameter may not share storage with any other parameter (tied weights)."""
    owners: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if param.device.type == "meta" or param.numel() == 0:
            continue
        ptr = param.untyped_storage().data_ptr()
        other = owners.setdefault(ptr, name)
        if other != name and (name in streamed or other in streamed):
            raise InvalidArgument(f"offload: streamed parameter storage is shared by {other!r} and {name!r} "
                                  "(tied weights cannot stream)")


def _digest(blocks: list[BlockLayout], resident: list[str], slot_bytes: int) -> str:
    doc = {"slot_bytes": slot_bytes, "resident": resident,
           "blocks": [[b.path, [[p.name, p.offset, str(p.dtype), list(p.shape)] for p in b.params]] for b in blocks]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def build_plan(model: nn.Module, resident_layers: int = 0) -> OffloadPlan:
    """The plan for `model`: discovered/declared blocks minus the leading resident ones."""
    paths = discover_blocks(model)
    if resident_layers >= len(paths):
        raise InvalidArgument(f"offload.resident_layers ({resident_layers}) must be less than the number of "
                              f"blocks of {type(model).__name__} ({len(paths)})")
    blocks = [_layout(p, model.get_submodule(p)) for p in paths[resident_layers:]]
    blocks = [b for b in blocks if b.params]
    if not blocks:
        raise InvalidArgument(f"offload: the streamed blocks of {type(model).__name__} hold no parameters")
    slot_bytes = _aligned(max(b.nbytes for b in blocks))
    resident = paths[:resident_layers]
    plan = OffloadPlan(tuple(blocks), tuple(resident), slot_bytes, _digest(blocks, resident, slot_bytes))
    _check_no_aliasing(model, plan.streamed_names)
    return plan
