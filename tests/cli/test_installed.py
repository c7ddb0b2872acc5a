"""An installed (non-editable) starmesh works outside the checkout: a wheel built from
the package sources, installed with `pip install --target`, run from a directory outside
the checkout with only that directory (and the third-party packages) on the path.

The commands run under `python -S`: the development virtualenv's editable install is a
.pth hook that maps every package back to the checkout, so a module or data file missing
from the wheel would go unnoticed; without site processing the .pth files never run and
the third-party packages come in through PYTHONPATH, after the install.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def _package_sources(dest: Path) -> None:
    """What the wheel is built from: pyproject, README and the packages it includes, plus
    compose/ (cluster/deployment_files links into it). A copy, because an in-tree build
    writes build/ and *.egg-info into the checkout other test runs import from."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = sorted({pattern.rstrip("*").rstrip(".") for pattern in include} | {"compose"})
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for top in tops:
        if (REPO / top).is_dir():
            shutil.copytree(REPO / top, dest / top, symlinks=True, ignore=ignore)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("installed")
    _package_sources(root / "src")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"),
                    str(root / "src")], check=True, capture_output=True, timeout=240)
    wheel = next((root / "dist").glob("starmesh-*.whl"))
    subprocess.run([*pip, "install", "-q", "--no-deps", "--target", str(root / "site"), str(wheel)],
                   check=True, capture_output=True, timeout=240)
    return root / "site"


def _run(installed: Path, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """`python -S ARGS` from a directory outside the checkout, the install first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), *site.getsitepackages()]),
           "HF_HUB_OFFLINE": "1"}
    cwd = installed.parent / "elsewhere"
    cwd.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def test_the_command_runs_from_the_install(installed):
    result = _run(installed, "-m", "cli", "--help")
    assert result.returncode == 0, result.stderr
    for command in ("serve", "conductor", "up", "demo", "status", "trace", "health", "make-tiny", "generate"):
        assert command in result.stdout
    result = _run(installed, str(installed / "bin" / "starmesh"), "make-tiny", "--help")  # the console script
    assert result.returncode == 0 and "qwen3-omni" in result.stdout, result.stderr
    result = _run(installed, str(installed / "bin" / "starmesh"), "version")
    assert result.returncode == 0 and result.stdout.split() == ["starmesh", "0.1.0"], result


def test_modules_and_data_come_from_the_install(installed):
    probe = ("import json, cli.main, cluster.deployment_dir as d, engine.attention.cpu_kernels as k;"
             "cli.main.build_parser();"
             "print(json.dumps({'cli': cli.main.__file__, 'default': str(d.DEFAULT_DEPLOYMENT),"
             "'shipped': sorted(p.name for p in d.SHIPPED_DIR.glob('*.yaml')),"
             "'kernels': all(p.is_file() for p in k.SOURCES)}))")
    result = _run(installed, "-c", probe)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["cli"]).is_relative_to(installed) and Path(found["default"]).is_relative_to(installed)
    assert found["shipped"] == sorted(p.name for p in (REPO / "compose" / "deployments").glob("*.yaml"))
    assert found["kernels"]  # the CPU attention kernel's sources, compiled on first use


def test_status_reads_the_shipped_default_deployment(installed):
    result = _run(installed, "-m", "cli", "status", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    services = yaml.safe_load((REPO / "compose" / "deployments" / "local.yaml").read_text())["services"]
    assert sorted({row["service"] for row in rows}) == sorted(services)


def test_make_tiny_builds_a_checkpoint_from_the_install(installed, tmp_path):
    result = _run(installed, "-m", "cli", "make-tiny", "qwen3", str(tmp_path / "qwen3"))
    assert result.returncode == 0, result.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "qwen3").iterdir()}
