#!/usr/bin/env bash
# Quick start: install and build everything, then run the main job on the embedded default model:
# inspect it and export it to ONNX (out/default-onnx).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
model=$(.venv/bin/python scripts/make_default_model.py out/default-model 2>/dev/null | tail -1)
echo "== hfx inspect $model"
./build/hfx inspect "$model"
echo "== hfx export --model $model --format onnx out/default-onnx"
./build/hfx export --model "$model" --format onnx --overwrite out/default-onnx
