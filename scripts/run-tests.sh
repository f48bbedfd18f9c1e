#!/usr/bin/env bash
# Installs what is missing, builds, checks formatting, and runs the test suite. Slow
# end-to-end tests carry the CTest label `e2e` (set LATHE_E2E=1 to include them); GPU tests
# (label `gpu`) skip by themselves where no GPU is present.
#
# Then the fuzz smoke: the fuzz tree (build-fuzz/, clang with libFuzzer, ASan and UBSan; see
# scripts/fuzz.sh) is built and each fuzz target runs for a few seconds on its seed corpus
# (CTest label `fuzz` there). Building that tree costs about as much CPU as a third of the g++
# build (measured: see fuzz/README.md), which the CI's time allows; LATHE_FUZZ_SMOKE=0 skips
# it, and without clang it is skipped, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/check-format.sh
labels=()
if [[ "${LATHE_E2E:-0}" != "1" ]]; then labels=(-LE e2e); fi
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600 "${labels[@]}"

if [[ "${LATHE_FUZZ_SMOKE:-1}" == "0" ]]; then
  echo "run-tests: fuzz smoke skipped: LATHE_FUZZ_SMOKE=0"
elif ! command -v clang++ >/dev/null 2>&1; then
  echo "run-tests: fuzz smoke skipped: no clang++ (scripts/install-deps.sh installs it)"
else
  bash scripts/fuzz.sh --smoke
fi
