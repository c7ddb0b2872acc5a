#!/usr/bin/env bash
# Sets up starmesh on a fresh machine: system libraries, a virtualenv in .venv, the
# package with its test and Mooncake extras, every Python distribution at the version CI
# tested (constraints.txt; scripts/lock_constraints.sh regenerates it). Idempotent: a
# second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${STARMESH_VENV:-.venv}
PY=${PYTHON:-python3}

need_libs=()
for lib in libibverbs.so.1 libnuma.so.1; do
  ldconfig -p 2>/dev/null | grep -q "$lib" || need_libs+=("$lib")
done
if [ ${#need_libs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing libibverbs1 libnuma1 (Mooncake transport)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs1 libnuma1 >/dev/null
  else
    echo "setup: Mooncake needs ${need_libs[*]}; install them with: sudo apt-get install -y libibverbs1 libnuma1" >&2
    echo "setup: continuing; the Mooncake transport will be unavailable until then" >&2
  fi
fi

# docker-compose: only `docker-compose config -q` runs here (tests/cluster/test_compose.py
# validates compose/); --no-install-recommends keeps the Docker engine out.
if ! command -v docker-compose >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing docker-compose (validates compose/docker-compose.yml)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      docker-compose >/dev/null) || echo "setup: could not install docker-compose; its test will skip" >&2
  else
    echo "setup: docker-compose is missing (sudo apt-get install docker-compose); its test will skip" >&2
  fi
fi

# promtool: tests/cluster/test_dashboards.py parses the Grafana dashboard's PromQL and checks
# the Prometheus configs with it (and tests/cluster/test_metrics.py lints every /metrics).
# Only the binary is taken from Debian's prometheus package: installing the package would
# also set up a Prometheus server (and start it where services start on install).
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing promtool (from Debian's prometheus package)"
    tmp=$(mktemp -d) && chmod a+rwx "$tmp"   # apt-get download runs as _apt where it can
    (cd "$tmp" && apt-get update -qq && apt-get download -qq prometheus 2>/dev/null \
      && dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool \
      && install -m 0755 usr/bin/promtool /usr/local/bin/promtool) \
      || echo "setup: could not install promtool; its checks will skip" >&2
    rm -rf "$tmp"
  else
    echo "setup: promtool is missing (the binary of Debian's prometheus package); its checks will skip" >&2
  fi
fi

# g++ and ninja build the CPU attention kernel (engine/attention/cpu_kernels.py) on first
# use; without them decode attention runs in plain torch, about 1.3x slower a step.
if ! command -v g++ >/dev/null || ! command -v ninja >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing g++ ninja-build (the CPU attention kernel)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      g++ ninja-build >/dev/null) || echo "setup: could not install g++/ninja; plain torch attention" >&2
  else
    echo "setup: g++ or ninja is missing (sudo apt-get install g++ ninja-build); plain torch attention" >&2
  fi
fi

# chromium and its driver: the voice page's browser test (tests/gateway/test_realtime_voice_page.py)
# drives Debian's headless chromium; nothing is downloaded at test time. Installed once:
# a second run finds the binary and installs nothing.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing chromium chromium-driver (the voice page's browser test)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium chromium-driver >/dev/null) || echo "setup: could not install chromium; its test will skip" >&2
  else
    echo "setup: chromium is missing (sudo apt-get install chromium chromium-driver); its test will skip" >&2
  fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" "torch>=2.11"
  else
    # CPU-only: the pinned CPU wheel (an unpinned range pulls a multi-GB CUDA build);
    # constraints.txt pins the same release.
    "${PIP[@]}" "torch==2.13.0"
  fi
fi
"${PIP[@]}" -e ".[test,mooncake,reference]"
# The upstream V-JEPA 2-AC predictor the world model's fidelity test compares against; its
# torchvision/timm requirements would replace torch, and only its model modules are used.
"${PIP[@]}" --no-deps "cc-vjepa2==0.0.3" || echo "setup: cc-vjepa2 unavailable; its fidelity test will skip" >&2
"$VENV/bin/python" -m engine.attention.cpu_kernels || echo "setup: continuing without the CPU kernel" >&2
echo "setup: ready ($("$VENV/bin/python" -c 'import torch, grpc; print("torch", torch.__version__, "grpcio", grpc.__version__)'))"
