#!/usr/bin/env bash
# The main job: build lathe, then build the shipped hand-written GEMM schedule and print its
# speed next to OpenBLAS and oneDNN measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
./build/bin/lathe build --workload matmul:m=1024,n=1024,k=1024 \
  --trace examples/traces/matmul-1024.json --out build/matmul-1024.so --name lathe_gemm_1024
./build/bin/bench_gemm --trace examples/traces/matmul-1024.json
