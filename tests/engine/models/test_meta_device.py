"""engine.models.meta_device: modules built with shapes only and no random init, so that a
process that loads a model never imports torch._dynamo (torch's meta kernels of the
random initializers would)."""
from __future__ import annotations

import subprocess
import sys

import torch

from engine.models.meta_device import meta_device

BUILD = """
import sys
import torch
from engine.models.meta_device import meta_device
with meta_device():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
print(sorted({p.device.type for p in model.parameters()}), "torch._dynamo" in sys.modules)
"""


def test_parameters_are_on_meta_and_initializers_return_their_tensor_untouched():
    with meta_device():
        linear = torch.nn.Linear(3, 2)
        weight = torch.empty(2, 3)
        assert torch.nn.init.normal_(weight) is weight and torch.nn.init.zeros_(tensor=weight) is weight
    assert linear.weight.device.type == "meta" and linear.weight.shape == (2, 3)
    assert torch.empty(1).device.type == "cpu"  # only inside the block


def test_a_fresh_process_builds_a_model_without_importing_dynamo():
    out = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["['meta']", "False"], out.stdout + out.stderr
