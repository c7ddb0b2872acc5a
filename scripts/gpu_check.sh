#!/usr/bin/env bash
# GPU check of the thinker's CUDA path: the engine on a CUDA device against
# the CPU engine, FlashInfer with and without CUDA graphs, FlashInfer against the torch
# backend (tests/gpu, marker `gpu`, excluded from the default test run).
#
# Run it from any directory on a machine with an NVIDIA GPU and a CUDA build of torch:
#     scripts/gpu_check.sh            # extra args go to pytest, e.g. -x or -k graphs
# It installs flashinfer-python when it is missing (tests that need it skip if that
# fails, e.g. without network), then runs `pytest -m gpu tests/gpu` under a timeout.
# Python: $PYTHON, else .venv/bin/python, else python3. Time limit: $GPU_CHECK_TIMEOUT_S
# (default 480 s; the first FlashInfer use may JIT-compile kernels, which takes minutes).
# Exit status: pytest's; 3 when this Python has no CUDA; 124 on timeout.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
nvidia-smi -L 2>/dev/null || echo "gpu_check: nvidia-smi not found"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: $PY has no CUDA (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1))" >&2
  exit 3
fi
if ! "$PY" -c "import flashinfer" 2>/dev/null; then
  echo "gpu_check: installing flashinfer-python"
  timeout 300 "$PY" -m pip install -q --disable-pip-version-check flashinfer-python \
    || echo "gpu_check: could not install flashinfer-python; the FlashInfer tests will skip" >&2
fi
"$PY" -c "import torch; print('gpu_check: torch', torch.__version__, torch.cuda.get_device_name(0))"
"$PY" -c "import flashinfer; print('gpu_check: flashinfer', flashinfer.__version__)" 2>/dev/null \
  || echo "gpu_check: flashinfer not importable"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout "${GPU_CHECK_TIMEOUT_S:-480}" \
  "$PY" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rs --log-level=INFO "$@"
