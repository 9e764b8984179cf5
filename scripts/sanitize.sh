#!/usr/bin/env bash
# Builds bitfold under sanitizers, each in its own build directory, and runs
# the CPU suite there:
#   asan  BITFOLD_SANITIZE=address,undefined in build-asan/: every CPU test
#         (CTest, fuzz targets included), UBSan fatal on the first report;
#   tsan  BITFOLD_SANITIZE=thread in build-tsan/: the runtime's threading
#         tests (the cache's racing threads and processes, concurrent
#         launches, the tune DB policy's worker).
# Usage: scripts/sanitize.sh [asan] [tsan] (default: both). Exit status 0
# only when every selected run is clean. Logs: <build dir>/sanitize.log.
# BITFOLD_SANITIZE_ROOT (default: the source root) holds the build dirs;
# extra CMake arguments in BITFOLD_SANITIZE_CMAKE_ARGS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
base=${BITFOLD_SANITIZE_ROOT:-$root}
jobs=${JOBS:-$(nproc)}
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(asan tsan)

configure() { # dir sanitizers
  if [[ ! -f $1/build.ninja ]]; then
    # shellcheck disable=SC2086
    cmake -S "$root" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DBITFOLD_SANITIZE="$2" -DBITFOLD_BUILD_BENCH=OFF \
      ${BITFOLD_SANITIZE_CMAKE_ARGS:-} >/dev/null
  fi
}

# The installed-package test links a plain C consumer against the
# sanitized libbitfold.so: not meaningful here.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# LLVM's and MLIR's own one-time allocations are not bitfold's leaks.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/scripts/lsan.supp:print_suppressions=0}

status=0
for step in "${steps[@]}"; do
  case $step in
    asan)
      dir=$base/build-asan
      configure "$dir" address,undefined
      ninja -C "$dir" -j"$jobs"
      (cd "$dir" && ctest -j"$jobs" --output-on-failure \
         -E 'InstalledPackage|^examples\.' 2>&1 | tee sanitize.log | tail -15) \
        || status=1
      grep -q '100% tests passed' "$dir/sanitize.log" || status=1 ;;
    tsan)
      dir=$base/build-tsan
      configure "$dir" thread
      ninja -C "$dir" -j"$jobs" runtime_cache_test runtime_launch_test \
        runtime_driver_fault_test autotune_test
      (cd "$dir" && ctest -j"$jobs" --output-on-failure \
         -R 'ManyThreads|Racing|Concurrent|Thread|Policy|DriverFault' \
         2>&1 | tee sanitize.log | tail -15) || status=1
      grep -q '100% tests passed' "$dir/sanitize.log" || status=1 ;;
    *) echo "sanitize.sh: unknown step '$step' (asan, tsan)" >&2; exit 2 ;;
  esac
done
exit $status
