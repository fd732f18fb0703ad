#!/usr/bin/env bash
# tests/gpu/device_check.sh: the GPU check of the CUDA backend (issue 4), one run, well under
# 10 minutes on an H200. Builds kvtier with CUDA for sm_90 (Release), runs the CUDA tests and
# kvtier-gpu-bench, and writes everything under $OUT (default ./gpu-out):
#
#   summary.txt   device, toolchain, mode, test counts, failures, every `ratio` line, timings
#   build.log     configure + build output (build mode only)
#   tests.log     ctest -L cuda output (build mode) or the gtest binaries' output (prebuilt)
#   integration.log  the integration tests' CUDA-backend instances (real kvtierd, kvtier-workload
#                 with its engine cache in device memory, kvtier-handoff-peer handing a sequence
#                 over through CUDA IPC): kvtier_service_test --gtest_filter='*cuda*'
#   bench.txt     kvtier-gpu-bench stdout (`ratio ...` lines) and stderr (progress)
#   bench.json    the measures as JSON
#   sanitizer.log compute-sanitizer memcheck of the CUDA tests (only with KVTIER_SANITIZER=1)
#
# Modes:
#   tests/gpu/device_check.sh
#       Build mode: configure and build in $BUILD (default /tmp/kvtier-gpu-build), then
#       `ctest -L cuda`. Needs the project's build dependencies (scripts/install-deps) there.
#   KVTIER_GPU_PREBUILT=DIR tests/gpu/device_check.sh  (DIR defaults to .gpu-prebuilt/ if present)
#       Prebuilt mode, for a GPU machine without those dependencies: DIR comes from
#       `tests/gpu/device_check.sh --prepare DIR` on a development machine (same CMake options;
#       it copies the test and bench binaries and libcudart into DIR, a few MiB to carry along).
#       The gtest binaries run directly: ctest's files name the preparing machine's paths.
#
# Exit status: 0 when the build, every CUDA test and every benchmark ran (benchmark ratios never
# fail the check; they are figures to report); 77 when no CUDA device is usable; 1 otherwise.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-/tmp/kvtier-gpu-build}
OUT=${OUT:-./gpu-out}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
CONFIGURE_ARGS=(-DKVTIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release
  -DKVTIER_WERROR=ON)
TARGETS=(kvtier_cuda_test kvtier_client_cache_cuda_test kvtier_ipc_peer kvtier_vmm_peer kvtier_cuda_host_test kvtier-gpu-bench
  kvtier_service_test kvtierd kvtierctl kvtier-workload kvtier-handoff-peer kvtier_c_abi_test)
# What the integration tests start (found through $KVTIER_TEST_BIN_DIR in prebuilt mode).
INTEGRATION_BINS=(tests/integration/kvtier_service_test daemon/kvtierd client/cli/kvtierctl
  tests/workload/kvtier-workload tests/workload/kvtier-handoff-peer tests/abi/kvtier_c_abi_test)

build() {  # build DIR: configure + build the CUDA targets; output on stdout
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  cmake -S "$SRC" -B "$1" "${generator[@]}" "${CONFIGURE_ARGS[@]}" &&
    cmake --build "$1" -j "$JOBS" --target "${TARGETS[@]}"
}

if [[ "${1:-}" == "--prepare" ]]; then
  dest=${2:?usage: device_check.sh --prepare DIR}
  build "$BUILD" || exit 1
  mkdir -p "$dest/lib"
  cp "$BUILD/tests/cuda/kvtier_cuda_test" "$BUILD/tests/cuda/kvtier_ipc_peer" "$BUILD/tests/cuda/kvtier_vmm_peer" \
    "$BUILD/tests/cuda/kvtier_cuda_host_test" "$BUILD/tests/gpu/kvtier-gpu-bench" \
    "$BUILD/tests/unit/client/kvtier_client_cache_cuda_test" "$dest/"
  for bin in "${INTEGRATION_BINS[@]}"; do cp "$BUILD/$bin" "$dest/"; done
  # Shared libraries the GPU machine may lack (Cap'n Proto, spdlog, fmt, cudart, ...); glibc's
  # own stay behind.
  for bin in "$dest"/kvtier*; do
    ldd "$bin" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
  strip --strip-debug "$dest"/kvtier_* "$dest"/kvtier-gpu-bench 2>/dev/null
  du -sh "$dest"
  exit 0
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
status=0
note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - $1 ))s; }

: >"$SUMMARY"
note "# kvtier device check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
if commit=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null); then
  git -C "$SRC" diff --quiet HEAD 2>/dev/null || commit+=" + local changes"
  note "commit: $commit"
fi
gpu_fields=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max
note "device: $({ nvidia-smi --query-gpu=$gpu_fields --format=csv,noheader ||
  echo 'nvidia-smi not available'; } 2>/dev/null | head -1)"
note "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'not found')"

# A prepared .gpu-prebuilt/ in the checkout (carried to the device) selects prebuilt mode.
if [[ -z "${KVTIER_GPU_PREBUILT:-}" && -x "$SRC/.gpu-prebuilt/kvtier_cuda_test" ]]; then
  KVTIER_GPU_PREBUILT=$SRC/.gpu-prebuilt
fi
if [[ -n "${KVTIER_GPU_PREBUILT:-}" ]]; then
  BIN=$(cd "$KVTIER_GPU_PREBUILT" && pwd)
  export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export KVTIER_IPC_PEER=$BIN/kvtier_ipc_peer
  export KVTIER_VMM_PEER=$BIN/kvtier_vmm_peer
  TEST_BIN=$BIN/kvtier_cuda_test
  HOST_TEST_BIN=$BIN/kvtier_cuda_host_test
  BENCH_BIN=$BIN/kvtier-gpu-bench
  note "mode: prebuilt ($BIN)"
else
  note "mode: build ($BUILD: ${CONFIGURE_ARGS[*]})"
  t0=$(date +%s)
  if ! build "$BUILD" >"$OUT/build.log" 2>&1; then
    note "build: FAILED after $(elapsed "$t0"); last lines of build.log:"
    tail -25 "$OUT/build.log" | tee -a "$SUMMARY"
    exit 1
  fi
  note "build: ok in $(elapsed "$t0")"
  TEST_BIN=$BUILD/tests/cuda/kvtier_cuda_test
  HOST_TEST_BIN=$BUILD/tests/cuda/kvtier_cuda_host_test
  BENCH_BIN=$BUILD/tests/gpu/kvtier-gpu-bench
fi

# --- tests -------------------------------------------------------------------------------------
t0=$(date +%s)
if [[ -n "${KVTIER_GPU_PREBUILT:-}" ]]; then
  { timeout 300 "$HOST_TEST_BIN" --gtest_brief=1; echo "host tests exit: $?"
    timeout 300 "$TEST_BIN"; echo "cuda tests exit: $?"
    timeout 120 "$BIN/kvtier_client_cache_cuda_test"; echo "client cache cuda tests exit: $?"; } >"$OUT/tests.log" 2>&1
  sum() { awk -v pat="$1" '$0 ~ pat {n += $4} END {print n + 0}' "$OUT/tests.log"; }
  passed=$(sum '^\\[  PASSED  \\] [0-9]+ test')
  skipped=$(sum '^\\[  SKIPPED \\] [0-9]+ test')
  failed=$(sum '^\\[  FAILED  \\] [0-9]+ test')
  grep -q 'exit: [1-9]' "$OUT/tests.log" && failed=$((failed > 0 ? failed : 1))
  note "tests: $passed passed, $failed failed, $skipped skipped in $(elapsed "$t0")"
else
  (cd "$BUILD" && timeout 420 ctest -L cuda --output-on-failure -j 4 --timeout 120) \
    >"$OUT/tests.log" 2>&1
  note "tests: $(grep -E 'tests passed|tests failed' "$OUT/tests.log" | tail -1) in $(elapsed "$t0")"
  skipped=$(grep -c '(Skipped)' "$OUT/tests.log")
  failed=$(grep -cE '\(Failed\)|\(Timeout\)|\(SEGFAULT\)|\(Subprocess aborted\)' "$OUT/tests.log")
  note "tests: $skipped skipped"
fi
if ((failed > 0)); then
  status=1
  note "failures:"
  grep -E '^\[  FAILED  \] [A-Za-z]|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|aborted' "$OUT/tests.log" |
    grep -v 'listed below' | head -40 | tee -a "$SUMMARY"
fi
if grep -q 'no CUDA device' "$OUT/tests.log"; then
  note "skip reason: $(grep -m1 -o 'no CUDA device.*' "$OUT/tests.log")"
fi

# --- integration tests on the CUDA backend -------------------------------------------------------
# The exactness tests of the tiering loop with the engine's cache in device memory: the CUDA
# executor does every offload, restore and staging copy against a real kvtierd.
t0=$(date +%s)
if [[ -n "${KVTIER_GPU_PREBUILT:-}" ]]; then
  IT_BIN=$BIN/kvtier_service_test
  export KVTIER_TEST_BIN_DIR=$BIN
else
  IT_BIN=$BUILD/tests/integration/kvtier_service_test
fi
timeout 300 "$IT_BIN" --gtest_filter='*cuda*:*Cuda*' >"$OUT/integration.log" 2>&1
it_status=$?
it_count() { awk -v pat="$1" '$0 ~ pat {n += $4} END {print n + 0}' "$OUT/integration.log"; }
note "integration (cuda backend): exit $it_status in $(elapsed "$t0"):" \
  "$(it_count '^\\[  PASSED  \\] [0-9]+ test') passed," \
  "$(it_count '^\\[  FAILED  \\] [0-9]+ test') failed, $(it_count '^\\[  SKIPPED \\] [0-9]+ test') skipped"
if ((it_status != 0)); then
  status=1
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/integration.log" | head -20 | tee -a "$SUMMARY"
fi

# --- benchmarks --------------------------------------------------------------------------------
t0=$(date +%s)
timeout 300 "$BENCH_BIN" --json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
bench_status=$?
note "bench: exit $bench_status in $(elapsed "$t0")"
grep '^ratio ' "$OUT/bench.txt" | tee -a "$SUMMARY"
grep -E 'failed|no CUDA device' "$OUT/bench.txt" | tee -a "$SUMMARY"
if ((bench_status == 77)); then
  status=77
elif ((bench_status != 0)); then
  status=1
fi

# --- optional: memory checker over the CUDA tests ------------------------------------------------
if [[ "${KVTIER_SANITIZER:-0}" == 1 ]] && command -v compute-sanitizer >/dev/null 2>&1; then
  t0=$(date +%s)
  timeout 300 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    "$TEST_BIN" --gtest_filter='-IpcTest.*' >"$OUT/sanitizer.log" 2>&1
  note "sanitizer: exit $? in $(elapsed "$t0") ($(grep -m1 'ERROR SUMMARY' "$OUT/sanitizer.log"))"
fi

note "result: $([[ $status == 0 ]] && echo ok || echo "status $status")"
exit "$status"
