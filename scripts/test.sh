#!/usr/bin/env bash
# Runs every test: the C++ unit tests (GoogleTest under CTest), then the oracle tests (pytest against
# Transformers eager and ONNX Runtime). Installs and builds first if needed (idempotent).
#   scripts/test.sh [extra pytest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
echo "== unit tests (ctest)"
ctest --test-dir build --output-on-failure -j2
echo "== oracle tests (pytest)"
.venv/bin/python -m pytest tests/oracle -q -p no:cacheprovider "$@"
