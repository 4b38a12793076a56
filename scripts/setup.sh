#!/usr/bin/env bash
# Installs everything hfx needs to build and test on a fresh Debian 12 machine, then builds.
# Idempotent: a second run installs nothing new and rebuilds incrementally.
#   scripts/setup.sh            system packages + Python venv + build
#   HFX_SKIP_APT=1 ...          skip apt-get (packages already there)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

apt_packages=(build-essential cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libopenblas-dev libssl-dev libzip-dev ccache
  libsndfile1-dev libsoxr-dev libfftw3-dev  # read, resample, transform sound: Whisper's front end (src/audio)
  espeak-ng  # speaks the test sentences offline: tests/oracle/test_audio_features.py
  flatbuffers-compiler libflatbuffers-dev  # flatc + headers: the ExecuTorch program schema (src/backends/executorch)
  clang libclang-rt-14-dev  # clang + its sanitizer runtimes: the fuzz targets (scripts/fuzz.sh)
  chromium)  # headless, renders report.html in tests/oracle/test_report.py and scripts/report_screenshots.sh

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${HFX_SKIP_APT:-0}" != 1 ] && [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python venv with the oracles (Transformers eager, ONNX checker, ONNX Runtime).
# torch is pinned to 2.13.0: the CPU wheel of that version is on the machine's disk.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# (grep drops a warning this machine's pip config prints for every package; pip's status is kept)
quiet() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; return "${PIPESTATUS[0]}"; }
stamp="$venv/.hfx-requirements"
if ! cmp -s requirements-test.txt "$stamp" 2>/dev/null; then
  echo "setup: installing Python test oracles into .venv"
  quiet "$venv/bin/pip" install -q --upgrade pip
  quiet "$venv/bin/pip" install -q torch==2.13.0
  quiet "$venv/bin/pip" install -q -r requirements-test.txt
  cp requirements-test.txt "$stamp"
fi

# Optimum, a client of the encoder-decoder layout: optimum-onnx pins an older Transformers, so it has a
# venv of its own (.venv-optimum), with the same torch.
optimum_venv="$root/.venv-optimum"
optimum_stamp="$optimum_venv/.hfx-requirements"
if ! cmp -s requirements-optimum.txt "$optimum_stamp" 2>/dev/null; then
  echo "setup: installing Optimum (a client test) into .venv-optimum"
  [ -x "$optimum_venv/bin/python" ] || python3 -m venv "$optimum_venv"
  quiet "$optimum_venv/bin/pip" install -q torch==2.13.0
  quiet "$optimum_venv/bin/pip" install -q -r requirements-optimum.txt
  cp requirements-optimum.txt "$optimum_stamp"
fi

# Build (Release, warnings as errors), through ccache where it is installed (rebuilds of a fresh
# clone on the same machine then take seconds).
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1  # paths relative to the clone: every clone shares the cache
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHFX_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build build
