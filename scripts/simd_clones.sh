#!/usr/bin/env bash
# Runs the unit tests of the kernels compiled as HFX_SIMD_CLONES (core/simd.h: the stored-weight
# products, MatMulNBits, the quantizer) on the clones this machine does not pick itself: AVX2 on an
# emulated Haswell, the baseline on an emulated x86-64 without either (QEMU user mode; the machine's
# own clone is what build/hfx_unit_tests runs anyway). Each clone is GCC's vector code for other
# registers, so a shuffle or a shift whose meaning depends on the lane count shows here.
# Not part of CI: under emulation the AVX2 run takes 2 to 4 minutes.
#   scripts/simd_clones.sh [BUILD_DIR]     (needs qemu-x86_64: apt-get install qemu-user)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
tests="$build/hfx_unit_tests"
filter='QuantKernels.*:StoredWeights.*:Quantize*'
command -v qemu-x86_64 >/dev/null || { echo "simd_clones: no qemu-x86_64 (apt-get install qemu-user)" >&2; exit 2; }
[ -x "$tests" ] || { echo "simd_clones: no $tests (ninja -C $build hfx_unit_tests)" >&2; exit 2; }

echo "== AVX2 clone (qemu -cpu Haswell)"
qemu-x86_64 -cpu Haswell "$tests" --gtest_filter="$filter" --gtest_brief=1
# qemu64 says it is an AMD K8: OpenBLAS's run-time choice for that uses 3DNow! (femms), which QEMU
# does not emulate, so OpenBLAS is told the core instead.
echo "== baseline clone (qemu -cpu qemu64)"
OPENBLAS_CORETYPE=Prescott qemu-x86_64 -cpu qemu64 "$tests" --gtest_filter="$filter" --gtest_brief=1
