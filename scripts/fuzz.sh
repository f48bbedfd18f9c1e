#!/usr/bin/env bash
# Builds the fuzz tree (build-fuzz/: clang, libFuzzer, AddressSanitizer and UBSan on lathe's
# own code; see fuzz/CMakeLists.txt) and runs each fuzz target for a while, one after
# another, on a working copy of its seed corpus. libFuzzer runs in fork mode and goes on after
# a crash, a leak or a timeout, keeping each such input; at the end a table gives, per target:
# executions, coverage (cov: edges, ft: features), corpus size, and the crashes, leaks,
# timeouts and out-of-memory inputs found.
#
# Usage: scripts/fuzz.sh [--minutes N | --seconds N] [--build-only | --no-build] [--smoke]
#                        [TARGET...]
#   --minutes N   per target (default 10)
#   --seconds N   per target, instead of minutes
#   --build-only  build the tree and the seed corpora, run nothing
#   --no-build    run what build-fuzz/ holds as it is
#   --smoke       the CI smoke run instead: ctest -L fuzz in build-fuzz (each target a few
#                 seconds on its seeds; fuzz/smoke.sh)
#   TARGET...     some of: onnx_import workload trace_json jsonl_import tuner_rpc dashboard_http
#
# Output in build-fuzz/fuzz-out/<target>/: log.txt, corpus/ (the grown corpus) and
# artifacts/ (crash-*, leak-*, timeout-*, oom-*: replay one with `build-fuzz/bin/fuzz_X FILE`).
# Debian's clang (14) provides libFuzzer; scripts/install-deps.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
build_only=0
no_build=0
smoke=0
targets=()
while (($#)); do
  case $1 in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --no-build) no_build=1; shift ;;
    --smoke) smoke=1; shift ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) targets+=("fuzz_${1#fuzz_}"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  targets=(fuzz_onnx_import fuzz_workload fuzz_trace_json fuzz_jsonl_import fuzz_tuner_rpc
           fuzz_dashboard_http)
fi

if ((!no_build)); then
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "fuzz.sh: clang++ not found (scripts/install-deps.sh installs Debian's clang)" >&2
    exit 1
  fi
  # Tests, benchmarks and the CUDA backend are not fuzzed: the tree holds the libraries the
  # targets need. -O1 without NDEBUG: assertions stay on.
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DLATHE_FUZZ=ON -DLATHE_BUILD_TESTS=OFF \
    -DLATHE_BUILD_BENCH=OFF -DLATHE_BUILD_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target lathe_fuzzers lathe_fuzz_corpus
fi
if ((build_only)); then exit 0; fi
if ((smoke)); then
  exec ctest --test-dir build-fuzz -L fuzz --output-on-failure -j"$(nproc)"
fi

out=build-fuzz/fuzz-out
summary=()
for t in "${targets[@]}"; do
  dir=$out/$t
  rm -rf "$dir"
  mkdir -p "$dir/artifacts"
  cp -r "build-fuzz/fuzz/corpus/$t" "$dir/corpus"
  echo "fuzz.sh: $t for ${seconds}s"
  # -timeout: one input over 20 s is a hang. -rss_limit_mb: a blow-up past 2 GiB is a bug.
  (cd "$dir" && "../../bin/$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix=artifacts/ corpus > log.txt 2>&1) || true
  # The last status line of the fork-mode parent: "#EXECS: cov: C ft: F corp: N ...".
  last=$(grep -E '^#[0-9]+: cov: ' "$dir/log.txt" | tail -n 1 || true)
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<< "$last")
  cov=$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<< "$last")
  ft=$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<< "$last")
  corp=$(sed -E 's/.* corp: ([0-9]+).*/\1/' <<< "$last")
  count() { find "$dir/artifacts" -name "$1-*" | wc -l; }
  summary+=("$(printf '%-20s %12s %8s %8s %8s %7s %6s %8s %5s' "$t" "${execs:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$(count crash)" "$(count leak)" "$(count timeout)" "$(count oom)")")
done

echo
printf '%-20s %12s %8s %8s %8s %7s %6s %8s %5s\n' target execs cov ft corpus crashes leaks \
  timeouts ooms
printf '%s\n' "${summary[@]}"
echo "(${seconds}s per target; logs and artifacts in $out/<target>/)"
