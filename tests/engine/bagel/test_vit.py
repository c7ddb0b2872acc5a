"""BAGEL's ViT side against transformers' SigLIP: at a full square grid the packed tower
equals SiglipVisionModel with one layer fewer than the config (same weights), the
connector and vit_pos_embed are the plain ops on the checkpoint's tensors, packed images
of different sizes each get their solo result, and the sin-cos table is diffusers'."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.bagel.preprocess import patchify, position_ids
from engine.models.bagel.sincos import PositionTable
from engine.models.bagel.vit import BagelVit, tiny_vit_state
from engine.models.bagel.vit_config import VitConfig

pytestmark = pytest.mark.timeout(120)

PREFIX = "vit_model.vision_model."
# (SiglipVisionConfig-style dict, LLM width, from_siglip overrides): every parameter random
CONFIGS = {
    "tanh": ({"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
              "patch_size": 14, "image_size": 56}, 64, {"max_num_patch_per_side": 4}),
    "exact": ({"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 3,
               "patch_size": 8, "image_size": 40, "layer_norm_eps": 1e-5, "hidden_act": "gelu"}, 32,
              {"max_num_patch_per_side": 5, "connector_act": "gelu"}),
}


def build(case: str, seed: int = 0) -> tuple[BagelVit, dict]:
    vit_config, llm_hidden, overrides = CONFIGS[case]
    state = tiny_vit_state(vit_config, llm_hidden, torch.Generator().manual_seed(seed), **overrides)
    vit = BagelVit(VitConfig.from_siglip(vit_config, llm_hidden, **overrides))
    vit.load_state_dict(state, strict=True)
    return vit.eval(), state


def siglip_reference(case: str, state: dict):
    """transformers' SiglipVisionModel with one layer fewer than the config, holding `state`
    (the linear patch embedding folded back into SigLIP's conv)."""
    from transformers import SiglipVisionConfig, SiglipVisionModel

    vit_config, _, _ = CONFIGS[case]
    config = SiglipVisionConfig(**{**vit_config, "num_hidden_layers": vit_config["num_hidden_layers"] - 1},
                                vision_use_head=False, attn_implementation="eager")
    model = SiglipVisionModel(config).eval()
    target = getattr(model, "vision_model", model)
    tower = {k.removeprefix(PREFIX): v for k, v in state.items() if k.startswith(PREFIX)}
    p, width = config.patch_size, config.hidden_size
    weight = tower["embeddings.patch_embedding.weight"]  # [D, p * p * C], patches flattened (row, col, channel)
    tower["embeddings.patch_embedding.weight"] = weight.view(width, p, p, -1).permute(0, 3, 1, 2).contiguous()
    target.load_state_dict(tower, strict=True)
    return model


def images_of(vit: BagelVit, grids: list[tuple[int, int]], seed: int):
    """Random normalized images with the given patch grids -> packed (pixels, ids, seq_lens) and the images."""
    c, g = vit.config, torch.Generator().manual_seed(seed)
    images = [torch.rand(3, r * c.patch_size, k * c.patch_size, generator=g) * 2 - 1 for r, k in grids]
    pixels = torch.cat([patchify(image, c.patch_size) for image in images])
    ids = torch.cat([position_ids(r, k, c.max_num_patch_per_side, "image") for r, k in grids])
    return pixels, ids, [r * k for r, k in grids], images


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_full_square_grid_equals_transformers_siglip_one_layer_fewer(case):
    vit, state = build(case)
    ref = siglip_reference(case, state)
    side = vit.config.patches_per_side
    pixels, ids, lens, images = images_of(vit, [(side, side)] * 2, seed=1)
    with torch.no_grad():
        want = ref(pixel_values=torch.stack(images)).last_hidden_state  # [2, side * side, D]
        tower = vit.vit_model(pixels, ids, lens)
        out = vit(pixels, ids, lens)
    assert torch.allclose(tower, want.reshape(-1, want.shape[-1]), atol=1e-5, rtol=0)
    # the connector (fc1, act, fc2) and vit_pos_embed as plain ops on the checkpoint's tensors
    from transformers.activations import ACT2FN

    act = ACT2FN[CONFIGS[case][2].get("connector_act", "gelu_pytorch_tanh")]
    hidden = act(want.reshape(-1, want.shape[-1]) @ state["connector.fc1.weight"].T + state["connector.fc1.bias"])
    projected = hidden @ state["connector.fc2.weight"].T + state["connector.fc2.bias"]
    assert torch.allclose(out, projected + state["vit_pos_embed.pos_embed"][ids], atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_packed_images_of_different_sizes_each_get_their_solo_result(case):
    vit, _ = build(case, seed=2)
    side = vit.config.patches_per_side
    grids = [(2, side), (side, 3), (1, 1), (side - 1, side - 2), (3, 2), (2, 3)]
    pixels, ids, lens, _ = images_of(vit, grids, seed=3)
    with torch.no_grad():
        packed = vit(pixels, ids, lens)
        alone = torch.cat([vit(p, i, [n]) for p, i, n in zip(pixels.split(lens), ids.split(lens), lens)])
        same_len = vit(pixels[-12:], ids[-12:], lens[-2:])  # two 6-patch images: the batched path
    assert packed.shape == (sum(lens), vit.config.llm_hidden_size)
    assert torch.allclose(packed, alone, atol=1e-5, rtol=0)
    assert torch.allclose(same_len, alone[-12:], atol=1e-5, rtol=0)


def test_state_keys_are_the_checkpoints_and_the_last_layer_is_dropped():
    vit_config, llm_hidden, overrides = CONFIGS["tanh"]
    state = tiny_vit_state(vit_config, llm_hidden, torch.Generator().manual_seed(0), **overrides)
    assert {k.split(".")[0] for k in state} == {"vit_model", "connector", "vit_pos_embed"}
    layers = {k.split(".")[4] for k in state if ".encoder.layers." in k}
    assert layers == {"0", "1"}  # num_hidden_layers 3, one dropped
    assert state["vit_pos_embed.pos_embed"].shape == (16, llm_hidden)
    assert state[PREFIX + "embeddings.patch_embedding.weight"].shape == (32, 14 * 14 * 3)
    kept = tiny_vit_state(vit_config, llm_hidden, torch.Generator().manual_seed(0), num_dropped_layers=0,
                          max_num_patch_per_side=4)
    assert {k.split(".")[4] for k in kept if ".encoder.layers." in k} == {"0", "1", "2"}


@pytest.mark.parametrize("side,dim", [(4, 64), (7, 32)])
def test_position_table_is_the_2d_sincos_table(side, dim):
    from diffusers.models.embeddings import get_2d_sincos_pos_embed

    want = get_2d_sincos_pos_embed(dim, side, base_size=side, output_type="pt")
    assert torch.allclose(PositionTable(side, dim).pos_embed, want.float(), atol=1e-6, rtol=0)


def test_bad_configs_and_inputs_name_the_field():
    vit_config, llm_hidden, _ = CONFIGS["tanh"]
    with pytest.raises(InvalidArgument, match="rope"):
        VitConfig.from_siglip(vit_config, llm_hidden, rope=True)
    with pytest.raises(InvalidArgument, match="max_num_patch_per_side"):
        VitConfig.from_siglip(vit_config, llm_hidden)  # 70 per side, the tower's table has 4
    with pytest.raises(InvalidArgument, match="hidden_act"):
        VitConfig.from_siglip({**vit_config, "hidden_act": "relu"}, llm_hidden, max_num_patch_per_side=4)
    with pytest.raises(InvalidArgument, match="'patch_size'"):
        VitConfig.from_siglip({k: v for k, v in vit_config.items() if k != "patch_size"}, llm_hidden)
    vit, _ = build("tanh")
    pixels, ids, lens, _ = images_of(vit, [(2, 2)], seed=0)
    with pytest.raises(InvalidArgument, match="pixels"):
        vit(pixels[:, :-1], ids, lens)
    with pytest.raises(InvalidArgument, match="seq_lens"):
        vit(pixels, ids, [3])
    with pytest.raises(InvalidArgument, match="position_ids"):
        vit(pixels, ids + 16, lens)
    with pytest.raises(InvalidArgument, match="image"):
        position_ids(5, 1, 4, "image")


def test_full_size_vit_side_builds_on_meta_with_the_release_shapes():
    # BAGEL-7B-MoT's vit_config.json (SigLIP so400m, patch 14 at 980 px) and its LLM width
    so400m = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
              "patch_size": 14, "image_size": 980, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
    with torch.device("meta"):
        vit = BagelVit(VitConfig.from_siglip(so400m, 3584))
    shapes = {k: tuple(v.shape) for k, v in vit.state_dict().items()}
    assert len(vit.vit_model.vision_model.encoder.layers) == 26
    assert shapes[PREFIX + "embeddings.patch_embedding.weight"] == (1152, 588)
    assert shapes[PREFIX + "embeddings.position_embedding.weight"] == (4900, 1152)
    assert shapes["connector.fc1.weight"] == (3584, 1152) and shapes["connector.fc2.weight"] == (3584, 3584)
    assert shapes["vit_pos_embed.pos_embed"] == (4900, 3584)
    assert not any(".head." in k for k in shapes)
