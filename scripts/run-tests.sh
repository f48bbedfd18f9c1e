#!/usr/bin/env bash
# Installs what is missing, builds, checks formatting, and runs the test suite. Slow
# end-to-end tests carry the CTest label `e2e` (set LATHE_E2E=1 to include them); GPU tests
# (label `gpu`) skip by themselves where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/check-format.sh
labels=()
if [[ "${LATHE_E2E:-0}" != "1" ]]; then labels=(-LE e2e); fi
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600 "${labels[@]}"
