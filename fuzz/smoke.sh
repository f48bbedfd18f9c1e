#!/usr/bin/env bash
# The CI smoke run of one fuzz target: every seed of its corpus, then a few seconds of fuzzing
# (LATHE_FUZZ_SMOKE_SECONDS, default 5) from a scratch copy of the corpus, so that the checked
# corpus is never modified. Fails on a crash, a leak, a timeout or a sanitizer report.
set -euo pipefail
fuzzer=$1
corpus=$2
seconds=${LATHE_FUZZ_SMOKE_SECONDS:-5}
if [[ ! -d "$corpus" ]] || [[ -z "$(ls -A "$corpus")" ]]; then
  echo "smoke: no seed corpus at $corpus" >&2
  exit 1
fi
work=$(mktemp -d /tmp/lathe-fuzz-smoke-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$corpus" "$work/corpus"
cd "$work"
# -timeout: one input may take at most 25 s (the tuner RPC sessions start and stop a service).
"$fuzzer" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
  "$work/corpus" 2>&1 | tail -n 40
exit "${PIPESTATUS[0]}"
