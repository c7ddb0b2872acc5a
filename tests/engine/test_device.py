"""The engine's `device` option on a machine without CUDA: validation errors name the
option, the CLIs and the thinker loader pass it through, and the CUDA modules import
without CUDA or flashinfer."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from engine.device_option import resolve_device
from engine.llm_engine import EngineConfig
from core.errors import InvalidArgument

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    """Pretend CUDA is there (validation only: nothing is allocated)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_without_cuda_is_invalid_argument_naming_the_option(no_cuda, device):
    with pytest.raises(InvalidArgument, match=r"engine\.device is '" + device + "', but CUDA is not available"):
        EngineConfig(device=device)


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "cpu:0", "", None, 0])
def test_malformed_devices_are_rejected(device):
    with pytest.raises(InvalidArgument, match=r"engine\.device must be 'cpu', 'cuda' or 'cuda:N'"):
        EngineConfig(device=device)


def test_cuda_indices_are_checked_against_the_visible_devices(two_gpus):
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(InvalidArgument, match=r"engine\.device is 'cuda:2', but this process sees 2 CUDA device"):
        EngineConfig(device="cuda:2")


def test_graph_sizes_only_on_cuda_with_graphs_on(two_gpus):
    assert EngineConfig().cuda_graph_sizes == []
    assert EngineConfig(device="cuda", max_num_seqs=48).cuda_graph_sizes == [1, 2, 4, 8, 16, 32, 48]
    assert EngineConfig(device="cuda:1", max_num_seqs=48, cuda_graphs=False).cuda_graph_sizes == []
    with pytest.raises(InvalidArgument, match=r"engine\.cuda_graphs must be a bool"):
        EngineConfig(cuda_graphs="yes")


def test_cpu_never_touches_cuda():
    assert resolve_device("cpu") == torch.device("cpu")
    assert EngineConfig(device="cpu").device == "cpu"


def test_thinker_loader_passes_the_device(no_cuda, tmp_path):
    from services.thinker.component import ThinkerComponent

    with pytest.raises(InvalidArgument, match=r"engine\.device"):
        ThinkerComponent.from_checkpoint(str(tmp_path), device="cuda")


def test_talker_engine_refuses_cuda(two_gpus):
    from engine.models.qwen3_omni.talker_engine import TalkerEngine

    class Spec:
        spec = None

    with pytest.raises(InvalidArgument, match=r"talker engine runs on 'cpu' only"):
        TalkerEngine(Spec(), EngineConfig(device="cuda"))


def test_serve_device_flag_reaches_the_factory():
    from cli.main import build_parser
    from cli.serve import _factory_kwargs

    args = build_parser().parse_args(["serve", "thinker", "--checkpoint", "ckpt", "--device", "cuda:1",
                                      "--option", "max_num_seqs=8"])
    assert _factory_kwargs(args) == {"checkpoint": "ckpt", "device": "cuda:1", "max_num_seqs": 8}
    args = build_parser().parse_args(["serve", "thinker", "--checkpoint", "ckpt"])
    assert "device" not in _factory_kwargs(args)


def test_generate_device_flag_is_validated(no_cuda, capsys, tmp_path):
    from cli.main import main

    rc = main(["generate", "--checkpoint", str(tmp_path), "--input-ids", "1,2", "--device", "cuda"])
    assert rc == 2
    assert "engine.device is 'cuda', but CUDA is not available" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_serve_thinker_on_cuda_without_cuda_exits_with_the_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO}
    result = subprocess.run([sys.executable, "-m", "cli", "serve", "thinker", "--checkpoint", str(tmp_path),
                             "--device", "cuda"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result
    assert "engine.device is 'cuda', but CUDA is not available" in result.stderr


def test_cuda_modules_import_without_cuda_or_flashinfer():
    code = ("import sys, torch, engine.device_option, engine.cuda_graphs, engine.cuda_runner, engine.plan_ahead, "
            "engine.llm_engine; assert 'flashinfer' not in sys.modules; "
            "assert not torch.cuda.is_initialized(); print('ok')")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
