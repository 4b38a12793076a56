#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/ and runs each for a while.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default 10 s, every target in fuzz/
# Prints each target's execution count; exits non-zero when any target finds something (crash,
# sanitizer report, leak, timeout, out-of-memory, or a broken contract: see fuzz/harness.h). The
# input that triggered it is saved as build-fuzz/findings/<target>/crash-* (or leak-, timeout-,
# oom-); reproduce with `build-fuzz/fuzz_<target> FILE`. New inputs found while fuzzing go to
# build-fuzz/corpus/<target>/ (kept between runs); the seeds in fuzz/corpus/ are never written.
# Env: HFX_FUZZ_JOBS (ninja -j), HFX_FUZZ_BUILD (build folder, default build-fuzz),
#      HFX_FUZZ_ARGS (extra libFuzzer flags).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# ccache keys on paths relative to the clone, so any clone of the same sources shares the cache.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
seconds=${1:-10}
shift || true
build=${HFX_FUZZ_BUILD:-build-fuzz}
all_targets=(safetensors config index tokenizer manifest onnx artifact audio)
[ $# -gt 0 ] && targets=("$@") || targets=("${all_targets[@]}")

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
if [ ! -f "$build/build.ninja" ]; then
  mkdir -p "$build"
  # Through ccache where installed (scripts/setup.sh): the sanitizer build of a fresh clone is the
  # slowest step of the suite, and its objects do not change between runs of the same sources.
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHFX_FUZZ=ON -DHFX_OPENVINO=OFF -DHFX_EXECUTORCH_RUNTIME=OFF \
    -DHFX_BUILD_TESTS=OFF "${launcher[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 2; }
fi
jobs=()
[ -n "${HFX_FUZZ_JOBS:-}" ] && jobs=(-j "$HFX_FUZZ_JOBS")
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
if ! ninja -C "$build" "${jobs[@]}" "${build_targets[@]}" >"$build/fuzz-build.log" 2>&1; then
  tail -40 "$build/fuzz-build.log" >&2
  echo "fuzz: build failed (full log: $build/fuzz-build.log)" >&2
  exit 2
fi

# Leaks, UB and ASan reports all abort the run; a unit slower than 30 s or above 2 GB RSS is a finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
total=0
printf '%-12s %12s %8s  %s\n' target executions seconds result
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  findings="$build/findings/$t"
  log="$build/fuzz-$t.log"
  mkdir -p "$work" "$findings"
  # shellcheck disable=SC2086
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$findings/" ${HFX_FUZZ_ARGS:-} "$work" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  [ -z "$execs" ] && execs=$(grep -oE '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | tr -dc 0-9)
  [ -z "$execs" ] && execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -dc 0-9)
  execs=${execs:-0}
  total=$((total + execs))
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="FINDING (exit $rc): $(grep -m1 -E '==hfx-fuzz==|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log" | cut -c1-160)"
    failed+=("$t")
  fi
  printf '%-12s %12s %8s  %s\n' "$t" "$execs" "$seconds" "$result"
done
echo "total executions: $total"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs in $build/findings/, logs in $build/fuzz-<target>.log)" >&2
  exit 1
fi
