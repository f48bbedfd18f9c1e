#!/bin/bash
# Runs lathe's GPU checks on a GPU host from a bundle of scripts/gpu-host-bundle.sh:
#   gpu-host-check.sh BUNDLE_DIR [OUT_DIR]
# tests bundle: the gpu-labelled tests (cuda_test GpuDeviceTest/GpuRunTest, worker_test
# GpuMeasurerTest), each under the host's NVRTC, and bench_cuda against cuBLAS/cuDNN;
# service bundle: lathed + a lathe-worker registering `cuda` + `lathe tune --tuner --target
# cuda` on a GEMM and a convolution (the distributed GPU path), then the database's records.
# Logs go to OUT_DIR (default ./gpu-check-out). TRIALS (default 48) sets the tuning budgets.
set -u
bundle=${1:?usage: gpu-host-check.sh BUNDLE_DIR [OUT_DIR]}
out=${2:-gpu-check-out}
mkdir -p "$out"
D=$(mktemp -d)
for t in "$bundle"/lathe-gpu-*.tar.xz; do tar -C "$D" -xJf "$t" || exit 3; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
# The toolkit's NVRTC, cuBLAS and cuDNN wherever the host keeps them.
libdirs=$(find /usr /opt -name 'libnvrtc.so.13' -o -name 'libcublas.so.13' -o -name 'libcudnn.so.9' \
  2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$D/l:$libdirs${LD_LIBRARY_PATH:-}"
# Tests find lathe-measure at the build path they were compiled with: point it here.
export LATHE_MEASURE_BIN="$D/bin/lathe-measure"
rc=0
if [ -x "$D/bin/cuda_test" ]; then
  "$D/bin/cuda_test" --gtest_filter='GpuDeviceTest.*:Ops/GpuRunTest.*' > "$out/cuda_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED) +\]' "$out/cuda_test.log"
  "$D/bin/worker_test" --gtest_filter='GpuMeasurerTest.*' > "$out/worker_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED) +\]' "$out/worker_test.log"
  "$D/bin/bench_cuda" --trials "${TRIALS:-48}" 2>&1 | grep -v 'best trace' | tee "$out/bench_cuda.log"
fi
if [ -x "$D/bin/lathed" ]; then
  port=${LATHE_PORT:-50551}
  "$D/bin/lathed" --listen "127.0.0.1:$port" --db "$out/gpu.db" > "$out/lathed.log" 2>&1 &
  daemon=$!
  sleep 3
  "$D/bin/lathe-worker" --tuner "127.0.0.1:$port" --device cuda --spool "$D/spool" \
    > "$out/worker.log" 2>&1 &
  worker=$!
  sleep 3
  for w in "matmul:m=1024,n=1024,k=1024" "conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1"; do
    "$D/bin/lathe" tune --tuner "127.0.0.1:$port" --target cuda --workload "$w" \
      --trials "${TRIALS:-48}" 2>&1 | grep -v '^\[' | tail -10 || rc=1
  done
  "$D/bin/lathe" db stats --db "$out/gpu.db" | tail -6
  kill "$worker" "$daemon" 2>/dev/null
fi
rm -rf "$D"
exit $rc
