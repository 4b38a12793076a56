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
# Two workers (HFX_TEST_JOBS), a test file each at a time: module fixtures (one export per case) stay
# shared within a file, and every fixture writes under its worker's own tmp folder.
.venv/bin/python -m pytest tests/oracle -q -p no:cacheprovider -n "${HFX_TEST_JOBS:-2}" --dist loadfile "$@"
