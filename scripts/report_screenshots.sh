#!/usr/bin/env bash
# Makes docs/report-pass.png and docs/report-fail.png: the tiny llama of the oracle tests exported,
# verified (pass), then one weight of layer 1 scaled in the artifact with hfx.json re-signed (as a
# wrong writer would leave it) and verified again (fail), each report.html shot by headless Chromium.
#   scripts/report_screenshots.sh            (after a build: uses build/hfx and .venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
hfx="${HFX_BIN:-$root/build/hfx}"
python="$root/.venv/bin/python"
chromium=$(command -v chromium) || { echo "report_screenshots: chromium is not installed (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

PYTHONPATH="$root/tests/oracle" "$python" -c "import sys, tiny_models; tiny_models.make('llama', sys.argv[1])" "$work/tiny-llama" 2>/dev/null
"$hfx" export --model "$work/tiny-llama" --format onnx --onnx-profile portable --quiet "$work/llama"
cp -r "$work/llama" "$work/llama-broken"
"$hfx" verify "$work/llama" --tokens 24 >/dev/null
PYTHONPATH="$root/tests/oracle" "$python" "$root/tests/oracle/report_helpers.py" "$work/llama-broken"
if "$hfx" verify "$work/llama-broken" --tokens 24 --no-reexport >/dev/null; then
  echo "report_screenshots: the broken export passed verify" >&2
  exit 1
fi
shot() {  # page png
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,1500 \
    --screenshot="$2" "file://$1" >/dev/null 2>&1
}
shot "$work/llama/verify/reference/report.html" "$root/docs/report-pass.png"
shot "$work/llama-broken/verify/reference/report.html" "$root/docs/report-fail.png"
echo "wrote docs/report-pass.png and docs/report-fail.png"
