"""SD3 checkpoints in diffusers layout: model_index.json plus one folder per component.

Components are loaded with their libraries' own classes (diffusers for the DiT and the
VAE, transformers for the text encoders), from local files only, weights through
safetensors. `Sd3Geometry` is what the nodes need to agree on shapes, read from the
JSON configs alone (no weights).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from core.errors import InvalidArgument

DTYPES = ("float32", "bfloat16", "float16")
SD3_TRANSFORMER = "SD3Transformer2DModel"  # the class model_index.json names for the DiT


@dataclass(frozen=True)
class Sd3Geometry:
    vae_scale_factor: int   # pixels per latent cell (2 ** (VAE blocks - 1))
    patch_size: int         # latent cells per DiT token side
    latent_channels: int    # C of the latent [B, C, h, w]
    pos_embed_max_size: int = 0  # DiT tokens per side its position embedding covers (0: no limit)

    def __post_init__(self) -> None:
        if min(self.vae_scale_factor, self.patch_size, self.latent_channels) < 1:
            raise ValueError(f"Sd3Geometry: every field must be >= 1, got {self}")

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of this (as StableDiffusion3Pipeline checks)."""
        return self.vae_scale_factor * self.patch_size

    @property
    def max_side(self) -> int:
        """Largest image side the DiT's position embedding covers (0: no limit)."""
        return self.pos_embed_max_size * self.size_multiple


def checkpoint_dir(checkpoint: str | Path) -> Path:
    path = Path(checkpoint)
    if not (path / "model_index.json").is_file():
        raise InvalidArgument(f"checkpoint {str(path)!r} is not a diffusers checkpoint (no model_index.json)")
    return path


def is_sd3_checkpoint(checkpoint: str | Path, component: str = "transformer") -> bool:
    """Whether `checkpoint` is an SD3 pipeline in diffusers layout with `component` (what
    the model's hooks ask before loading anything): its model_index.json names SD3's
    transformer class. Reads that JSON only; False for anything else."""
    index = Path(checkpoint) / "model_index.json"
    try:
        layout = json.loads(index.read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(layout, dict) and list(layout.get("transformer") or [])[-1:] == [SD3_TRANSFORMER]
            and any(layout.get(component) or []))


def read_config(checkpoint: str | Path, subfolder: str) -> dict:
    path = checkpoint_dir(checkpoint) / subfolder
    for name in ("config.json", "scheduler_config.json"):
        if (path / name).is_file():
            return json.loads((path / name).read_text())
    raise InvalidArgument(f"checkpoint {str(checkpoint)!r}: {subfolder}/ has no config")


def geometry(checkpoint: str | Path) -> Sd3Geometry:
    vae, transformer = read_config(checkpoint, "vae"), read_config(checkpoint, "transformer")
    return Sd3Geometry(vae_scale_factor=2 ** (len(vae["block_out_channels"]) - 1),
                       patch_size=int(transformer["patch_size"]), latent_channels=int(transformer["in_channels"]),
                       pos_embed_max_size=int(transformer.get("pos_embed_max_size") or 0))


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise InvalidArgument(f"dtype {name!r} is not one of {DTYPES}")
    return getattr(torch, name)


def load_model(cls, checkpoint: str | Path, subfolder: str, dtype: str = "float32", device: str = "cpu"):
    """`cls.from_pretrained` of one component folder, local files only, in eval mode."""
    path = checkpoint_dir(checkpoint) / subfolder
    if not path.is_dir():
        raise InvalidArgument(f"checkpoint {str(checkpoint)!r} has no {subfolder}/ folder")
    kwargs = {"low_cpu_mem_usage": False} if cls.__module__.startswith("diffusers") else {}  # no accelerate
    model = cls.from_pretrained(str(path), local_files_only=True, dtype=torch_dtype(dtype), **kwargs)
    return model.to(device).eval().requires_grad_(False)


def attach_model_offload(module, checkpoint: str | Path, subfolder: str, offload, prefix: str = "", group=None):
    """Layerwise offload for a loaded diffusers module (None when offload is off). With the
    mmap backing, its streamed parameters become views of the component's safetensors
    files (`prefix` + parameter name is the tensor name there), after the preflight.
    `group`: the process group an AllGather transfer gathers over (a dlo_group's)."""
    from engine.offload.loading import attach_offload, prepare_host_weights

    if offload is None:
        return None
    folder = checkpoint_dir(checkpoint) / subfolder
    mapped = None
    if offload.host_backing == "mmap":
        from safetensors import safe_open

        files = {}
        for file in sorted(folder.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                files.update({name: file for name in f.keys()})
        sources = [(name, prefix + name, None) for name, _ in module.named_parameters()]
        mapped = prepare_host_weights(module, offload, files, sources)
    return attach_offload(module, offload, mapped, group=group)
