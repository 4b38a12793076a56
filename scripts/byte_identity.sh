#!/usr/bin/env bash
# Checks that the working tree's hfx writes byte-identical artifacts to BASE_REV's (default: main):
# builds BASE_REV in a scratch worktree (through ccache), builds the working tree, and runs
# scripts/byte_identity.py over both binaries. Exit 0 when every file of every export is identical.
#   scripts/byte_identity.sh [BASE_REV] [WORK_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:-main}
work=${2:-/tmp/hfx-byte-identity}
python="$root/.venv/bin/python"
[ -x "$python" ] || { echo "byte_identity: no $python (run scripts/setup.sh first)" >&2; exit 2; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
build() {  # build SRC_DIR BUILD_DIR
  CCACHE_BASEDIR="$1" CCACHE_NOHASHDIR=1 cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DHFX_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
  CCACHE_BASEDIR="$1" CCACHE_NOHASHDIR=1 cmake --build "$2" --target hfx >/dev/null
}

mkdir -p "$work"
rev=$(git -C "$root" rev-parse --verify "$base^{commit}")
src="$work/base-src"
if [ ! -d "$src" ] || [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$rev" ]; then
  git -C "$root" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
  git -C "$root" worktree add --detach "$src" "$rev" >/dev/null
fi
# the base's CMake finds the OpenVINO SDK through its own .venv, as the working tree's does
[ -e "$src/.venv" ] || ln -s "$root/.venv" "$src/.venv"
echo "byte_identity: building $base ($rev) and the working tree"
build "$src" "$work/base-build"
build "$root" "$work/head-build"
"$python" "$root/scripts/byte_identity.py" --work "$work" \
  --hfx "base=$work/base-build/hfx" --hfx "head=$work/head-build/hfx"
