#!/bin/bash
# Runs lathe's GPU checks on a GPU host from a bundle of scripts/gpu-host-bundle.sh:
#   gpu-host-check.sh BUNDLE_DIR [OUT_DIR]
# tests bundle: the gpu-labelled tests (cuda_test GpuDeviceTest/GpuRunTest, measure_test
# GpuMeasurerTest, gpumodel_test RealGpu), each under the host's NVRTC, bench_cuda against
# cuBLAS/cuDNN (SGEMM and the conv in fp32, then the TF32 GEMM against cuBLAS in TF32 mode),
# and the PP-OCR models run whole on the GPU (`lathe run --target cuda`, the default GPU
# schedules, the rule-picked ones, and the rule-picked ones with `--gpu-math tf32`: TF32
# tensor cores, compared at 1e-2) against the same model on the CPU;
# service bundle: lathed + a lathe-worker registering `cuda` + `lathe tune --tuner --target
# cuda` on a GEMM and a convolution (the distributed GPU path), then the database's records.
# Logs go to OUT_DIR (default ./gpu-check-out). TRIALS (default 48) sets the tuning budgets;
# LATHE_GPU_TARGET (default cuda) the models' GPU target (cuda-emu:sm_90 tries the script
# without a GPU).
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
  "$D/bin/measure_test" --gtest_filter='GpuMeasurerTest.*' > "$out/measure_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED) +\]' "$out/measure_test.log"
  "$D/bin/bench_cuda" --trials "${TRIALS:-48}" 2>&1 | grep -v 'best trace' | tee "$out/bench_cuda.log"
fi
if [ -x "$D/bin/gpumodel_test" ]; then
  "$D/bin/gpumodel_test" --gtest_filter='*RealGpu*' > "$out/gpumodel_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]' "$out/gpumodel_test.log"
fi
# Each model on the GPU and on the CPU on the same (deterministic) inputs: max error and the
# latencies side by side (--profile logs: where the GPU's time goes).
for m in "$D"/m/*.onnx; do
  [ -f "$m" ] || continue
  case $(basename "$m") in
    *cls*) shape=x=1x3x48x192 ;;
    *rec*) shape=x=1x3x48x320 ;;
    *det*) shape=x=1x3x640x640 ;;
    *) continue ;;
  esac
  name=$(basename "$m" .onnx)
  "$D/bin/lathe" run --model "$m" --input "$shape" --target cpu --repeat 10 --json \
    --dump "$out/$name.cpu" > "$out/$name.cpu.json" 2> "$out/$name.cpu.err" || { rc=1; cat "$out/$name.cpu.err"; continue; }
  for sched in default rule tf32; do
    flag=; [ $sched = default ] && flag=--default-schedules
    [ $sched = tf32 ] && flag="--gpu-math tf32"
    "$D/bin/lathe" run --model "$m" --input "$shape" --target "${LATHE_GPU_TARGET:-cuda}" $flag --repeat 50 --json --profile \
      --dump "$out/$name.gpu-$sched" > "$out/$name.gpu-$sched.json" 2> "$out/$name.gpu-$sched.err" ||
      { rc=1; echo "FAIL: $name on the GPU ($sched): $(tail -2 "$out/$name.gpu-$sched.err")"; continue; }
    python3 - "$out/$name" "$sched" <<'PY' || rc=1
import array, json, sys
base, sched = sys.argv[1], sys.argv[2]
cpu, gpu = json.load(open(base + ".cpu.json")), json.load(open(base + f".gpu-{sched}.json"))
worst = 0.0
for i in range(len(cpu["outputs"])):
    a, b = array.array("f"), array.array("f")
    a.frombytes(open(f"{base}.cpu/{i}.bin", "rb").read())
    b.frombytes(open(f"{base}.gpu-{sched}/{i}.bin", "rb").read())
    scale = max(max(abs(x) for x in a), 1e-6)
    worst = max(worst, max(abs(x - y) for x, y in zip(a, b)) / scale)
ok = worst <= (1e-2 if sched == "tf32" else 1e-3)
print(f"{'ok' if ok else 'FAIL'}: {base.split('/')[-1]} on {gpu['device']} ({sched} schedules): "
      f"{gpu['latency_ms']:.3f} ms (CPU {cpu['latency_ms']:.2f} ms), compiled in "
      f"{gpu['compile_s']:.1f} s, max error {worst:.2e} of max |cpu|")
sys.exit(0 if ok else 1)
PY
  done
done
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
