#!/usr/bin/env bash
# The main job: build lathe, tune one operator on this machine with the embedded tuner
# (results go to the default database, $LATHE_DB or ~/.local/share/lathe/tuning.db), and time
# the shipped hand-written GEMM trace next to OpenBLAS and oneDNN measured in the same run.
# Arguments are passed to `lathe tune` (default: --workload matmul:m=512,n=512,k=512 --trials 300).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
args=("$@")
if ((${#args[@]} == 0)); then
  args=(--workload matmul:m=512,n=512,k=512 --trials 300 --plot build/tuning-curve.svg)
fi
./build/bin/lathe tune "${args[@]}"
./build/bin/bench_gemm --trace examples/traces/matmul-1024.json
