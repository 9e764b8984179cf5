#!/usr/bin/env bash
# Builds bitfold under sanitizers, each in its own build directory, and runs
# the CPU suite there:
#   asan  BITFOLD_SANITIZE=address,undefined in build-asan/: every target
#         and every CPU test (CTest, fuzz targets included; not the
#         installed-package, example, release-probe and Python tests, which
#         load the sanitized library into unsanitized programs, nor, unless
#         SANITIZE_ALL=1, the two exhaustive codegen sweeps), UBSan fatal on
#         the first report.
#   tsan  BITFOLD_SANITIZE=thread in build-tsan/: the threading tests,
#         found by name: every gtest case whose "Suite, Name" matches
#         TSAN_TESTS (default: Concurren|ManyThreads|PerThread|Racing|Parallel|Background|Prewarm|AsyncCompile).
#         Name a new threading test so that it matches (e.g. a suite
#         "...Concurrency") and it runs here; only the test binaries that
#         hold such cases are built (found through compile_commands.json).
#   fuzz  clang-22 (Debian's clang-22 and libclang-rt-22-dev) in
#         build-fuzz/: libFuzzer targets with the libraries instrumented
#         for coverage (-fsanitize=fuzzer-no-link) under ASan+UBSan; each
#         runs FUZZ_SECONDS (600) seconds, niced, one after the other;
#         logs in build-fuzz/fuzz-<target>.log.
# Usage: scripts/sanitize.sh [asan] [tsan] [fuzz] (default: asan tsan). Exit
# status 0 only when every selected run is clean. Logs: <build
# dir>/sanitize.log. Builds and tests run under `nice -n $NICE` (10) with
# JOBS (nproc) jobs, through ccache (CCACHE_BASEDIR defaults to the folder
# above the source root, so worktrees share hits). BITFOLD_SANITIZE_ROOT
# (default: the source root) holds the build dirs; extra CMake arguments in
# BITFOLD_SANITIZE_CMAKE_ARGS. SANITIZE_TARGETS / SANITIZE_TESTS narrow the
# asan step (default: everything).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
base=${BITFOLD_SANITIZE_ROOT:-$root}
jobs=${JOBS:-$(nproc)}
# The build machine is shared: builds and test runs yield to interactive work,
# and ccache hits across worktrees need paths relative to a common base.
nice_cmd=(nice -n "${NICE:-10}")
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$root")}
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(asan tsan)

configure() { # dir sanitizers [cmake args...]
  local dir=$1 sanitizers=$2
  shift 2
  if [[ ! -f $dir/build.ninja ]]; then
    # shellcheck disable=SC2086
    # Release (no -g): debug info would double the compile time of CI's
    # two sanitizer builds; frame pointers keep the reports' stacks named.
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=${SANITIZE_BUILD_TYPE:-Release} \
      -DBITFOLD_SANITIZE="$sanitizers" -DBITFOLD_BUILD_BENCH=OFF "$@" \
      ${BITFOLD_SANITIZE_CMAKE_ARGS:-} >/dev/null
  fi
}

# intercept_tls_get_addr=0: GCC 12's LeakSanitizer guesses where a dynamic TLS
# block starts from its address (a block at 16 mod 4096 is read as glibc
# 2.19's memalign header), and glibc 2.36 mallocs those blocks: when the
# dlopen()ed PTX Compiler / nvJitLink's block lands there, the leak check's
# tracer dereferences garbage and the test aborts at exit ("Tracer caught
# signal 11", "DTLS 9 at 0x15a2-..."), depending only on the environment's
# size. Not tracking dynamic TLS loses no bitfold leak: its memory is
# reached from static TLS, stacks and globals.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:intercept_tls_get_addr=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# LLVM's and MLIR's own one-time allocations are not bitfold's leaks.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/scripts/lsan.supp:print_suppressions=0}

# The CMake targets of the test sources that define a gtest case whose
# "Suite, Name" matches the extended regex $2 (build dir $1 configured).
threading_targets() {
  local dir=$1 pattern=$2 sources
  sources=$(grep -rlE "^TEST(_F|_P)?\(.*($pattern)" "$root/tests" \
    --include='*.cpp' || true)
  [[ -n $sources ]] || return 0
  # shellcheck disable=SC2086
  python3 - "$dir/compile_commands.json" $sources <<'PY'
import json, re, sys
commands = json.load(open(sys.argv[1]))
wanted = set(sys.argv[2:])
targets = set()
for c in commands:
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", c.get("output", c["command"]))
    if c["file"] in wanted and m:
        targets.add(m.group(1))
print("\n".join(sorted(targets)))
PY
}

# They load the sanitized library into unsanitized programs (a C consumer,
# the Python interpreter, a plain link probe, a Python script).
asan_unloadable='InstalledPackage|^examples\.|^python\.|^release\.|^docs\.'
# The exhaustive codegen sweeps (every stock kernel x seed shape x legal
# config through LLVM, minutes each under ASan): the plain CTest run covers
# them, and under ASan the codegen stage tests and the bounded codegen fuzz
# target exercise the same emitters. SANITIZE_ALL=1 runs them too.
asan_slow='SeedShapes/AllConfigs|AtenConfigs\.EveryConfigCompiles'
asan_excluded=$asan_unloadable
[[ ${SANITIZE_ALL:-0} == 1 ]] || asan_excluded="$asan_unloadable|$asan_slow"
status=0
for step in "${steps[@]}"; do
  step_start=$SECONDS
  case $step in
    asan)
      dir=$base/build-asan
      configure "$dir" address,undefined
      # SANITIZE_TARGETS / SANITIZE_TESTS narrow a run (default: all).
      # shellcheck disable=SC2086
      "${nice_cmd[@]}" ninja -C "$dir" -j"$jobs" ${SANITIZE_TARGETS:-}
      # Not run (named in the log): the installed-package, example and
      # Python tests load the sanitized libbitfold.so into plain
      # (unsanitized) programs (a C consumer, the Python interpreter), which
      # ASan refuses (its runtime must be the first library loaded).
      echo "sanitize.sh: asan excludes ($asan_excluded; see the comments above asan_excluded):"
      (cd "$dir" && ctest -N -R "$asan_excluded" | sed -n 's/^ *Test *#[0-9]*: /  /p')
      (cd "$dir" && "${nice_cmd[@]}" ctest -j"$jobs" --output-on-failure \
         -E "$asan_excluded" ${SANITIZE_TESTS:+-R "$SANITIZE_TESTS"} \
         2>&1 | tee sanitize.log | tail -15) || status=1
      grep -q '100% tests passed' "$dir/sanitize.log" || status=1
      echo "sanitize.sh: asan: $(grep -E 'tests passed' "$dir/sanitize.log" | tail -1)" ;;
    tsan)
      dir=$base/build-tsan
      configure "$dir" thread
      pattern=${TSAN_TESTS:-Concurren|ManyThreads|PerThread|Racing|Parallel|Background|Prewarm|AsyncCompile|QuickFirst}
      mapfile -t tsan_targets < <(threading_targets "$dir" "$pattern")
      if [[ ${#tsan_targets[@]} -eq 0 ]]; then
        echo "sanitize.sh: no test matches '$pattern'" >&2
        status=1
        continue
      fi
      "${nice_cmd[@]}" ninja -C "$dir" -j"$jobs" "${tsan_targets[@]}"
      (cd "$dir" && "${nice_cmd[@]}" ctest -j"$jobs" --output-on-failure \
         -R "$pattern" 2>&1 | tee sanitize.log | tail -15) || status=1
      grep -q '100% tests passed' "$dir/sanitize.log" || status=1
      echo "sanitize.sh: tsan: $(grep -E 'tests passed' "$dir/sanitize.log" | tail -1)" ;;
    fuzz)
      dir=$base/build-fuzz
      configure "$dir" address,undefined -DCMAKE_C_COMPILER=clang-22 \
        -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link
      targets=$(cd "$root/tests/fuzz" && for d in */CMakeLists.txt; do
        sed -n 's/^bitfold_add_fuzz_target(\([a-z_0-9]*\).*/\1/p' "$d"; done)
      for t in $targets; do ninja -C "$dir" -j"$jobs" "fuzz_$t"; done
      for t in $targets; do
        bin=$(find "$dir/tests/fuzz" -name "fuzz_$t" -type f | head -1)
        seeds=$root/tests/fuzz/$t/corpus # by convention: target = folder
        [[ -d $seeds ]] || seeds=
        mkdir -p "$dir/fuzz-$t-corpus"
        # shellcheck disable=SC2086
        (cd "$dir" && ASAN_OPTIONS=detect_leaks=0 nice -n 15 "$bin" \
           -max_total_time="${FUZZ_SECONDS:-600}" -rss_limit_mb=4096 \
           -timeout=20 -print_final_stats=1 "fuzz-$t-corpus" $seeds \
           > "fuzz-$t.log" 2>&1) || status=1
        tail -3 "$dir/fuzz-$t.log"
      done ;;
    *) echo "sanitize.sh: unknown step '$step' (asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
  echo "sanitize.sh: $step took $((SECONDS - step_start)) s (build and tests)"
done
exit $status
