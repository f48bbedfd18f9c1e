#!/bin/bash
# Runs lathe's GPU checks on a GPU host from a bundle of scripts/gpu-host-bundle.sh:
#   gpu-host-check.sh BUNDLE_DIR [OUT_DIR]
# tests bundle: the gpu-labelled tests (cuda_test GpuDeviceTest/GpuRunTest, measure_test
# GpuMeasurerTest, gpumodel_test RealGpu), each under the host's NVRTC, bench_cuda against
# cuBLAS/cuDNN (SGEMM and the conv in fp32, then the TF32 GEMM and conv against cuBLAS and
# cuDNN in TF32 mode; each rule-picked row names its kernel template; 300 s at most),
# and the PP-OCR models run whole on the GPU (`lathe run --target cuda`, the default GPU
# schedules, the rule-picked ones, and the rule-picked ones with `--gpu-math tf32`: TF32
# tensor cores, compared at 1e-2) against the same model on the CPU;
# service bundle: lathed + a lathe-worker registering `cuda` + `lathe tune --tuner --target
# cuda` on a GEMM and a convolution (the distributed GPU path), then the database's records.
# Logs go to OUT_DIR (default ./gpu-check-out). TRIALS (default 48) sets the tuning budgets;
# LATHE_GPU_TARGET (default cuda) the models' GPU target (cuda-emu:sm_90 tries the script
# without a GPU); CHECK_SECONDS (default 480) bounds the whole check: each step runs under
# `timeout` with what is left, the most telling first (tests, bench_cuda, det, ResNet-18, cls,
# rec), so a lease that ends early still brings back those figures. ResNet-18 is written on the
# host by bench/make_models.py (python3 with onnx) beside this script's repository, and timed in
# PyTorch (cuDNN, fp32 and TF32) where the host has torchvision: the library's whole model.
# CHECK_MODELS (default "det resnet18 cls rec") picks the models, GPU_REPEAT (default 30) their runs;
# TUNE_TRIALS, TUNE_MODELS and TUNE_PER_TASK tune models on the GPU first (see below).
# SKIP_BENCH=1 leaves out bench_cuda; GPU_SCHEDS (default "default rule tf32") picks the
# schedules each model runs with (a short re-check after a rule change: GPU_SCHEDS=rule).
set -u
deadline=$((SECONDS + ${CHECK_SECONDS:-480}))
# bounded SECS CMD...: CMD under timeout, SECS or what is left of the check if less.
bounded() {
  local want=$1 left=$((deadline - SECONDS)); shift
  if [ $left -lt 5 ]; then echo "SKIPPED (check's time spent): $*" | cut -c1-160; return 124; fi
  timeout -k 5 $((want < left ? want : left)) "$@"
  local r=$?; [ $r = 124 ] && echo "TIMED OUT: $*" | cut -c1-160 >&2; return $r
}
# Python runs with the host's own library path: the bundle's libraries (and its stubs) are lathe's.
py=${CHECK_PYTHON:-python3}
pyrun() { LD_LIBRARY_PATH="$host_ldpath" "$py" "$@"; }
here=$(cd "$(dirname "$0")" && pwd)
bundle=${1:?usage: gpu-host-check.sh BUNDLE_DIR [OUT_DIR]}
out=${2:-gpu-check-out}
mkdir -p "$out"
D=$(mktemp -d)
for t in "$bundle"/lathe-gpu-*.tar.xz; do tar -C "$D" -xJf "$t" || exit 3; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
# The toolkit's NVRTC, cuBLAS and cuDNN wherever the host keeps them.
libdirs=$(find /usr /opt -name 'libnvrtc.so.13' -o -name 'libcublas.so.13' -o -name 'libcudnn.so.9' \
  2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
host_ldpath=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$D/l:$libdirs${LD_LIBRARY_PATH:-}"
# Tests find lathe-measure at the build path they were compiled with: point it here.
export LATHE_MEASURE_BIN="$D/bin/lathe-measure"
rc=0
if [ -x "$D/bin/cuda_test" ]; then
  bounded 90 "$D/bin/cuda_test" --gtest_filter='GpuDeviceTest.*:Ops/GpuRunTest.*' > "$out/cuda_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED) +\]' "$out/cuda_test.log"
  bounded 60 "$D/bin/measure_test" --gtest_filter='GpuMeasurerTest.*' > "$out/measure_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED) +\]' "$out/measure_test.log"
  [ "${SKIP_BENCH:-0}" = 1 ] || bounded 300 "$D/bin/bench_cuda" --trials "${TRIALS:-48}" > "$out/bench_cuda.full.log" 2>&1 || rc=1
  [ -f "$out/bench_cuda.full.log" ] && grep -v 'best trace' "$out/bench_cuda.full.log" | tee "$out/bench_cuda.log"
fi
# ResNet-18 (random weights, torchvision's shapes) written here; PyTorch's cuDNN time for it.
if [ -f "$here/../bench/make_models.py" ] && pyrun -c "import onnx" 2>/dev/null; then
  bounded 60 env LD_LIBRARY_PATH="$host_ldpath" "$py" "$here/../bench/make_models.py" "$D/m" > /dev/null && rm -f "$D/m/bert_layer.onnx"
fi
cat > "$D/torch_resnet18.py" <<'PY'
import torch, torchvision
m = torchvision.models.resnet18(weights=None).cuda().eval()
x = torch.randn(1, 3, 224, 224, device="cuda")
torch.backends.cudnn.benchmark = True
for tf32 in (False, True):
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    with torch.no_grad():
        for _ in range(20): m(x)
        torch.cuda.synchronize()
        ts = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); m(x); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    print(f"library: ResNet-18 1x3x224x224 in PyTorch {torch.__version__} eager, cuDNN "
          f"{'TF32' if tf32 else 'fp32'}: median {ts[len(ts) // 2]:.3f} ms, min {ts[0]:.3f} ms")
PY
# Each model on the GPU and on the CPU on the same (deterministic) inputs: max error and the
# latencies side by side (--profile logs: where the GPU's time goes).
# Compares a GPU run's dumped outputs with the CPU run's: COMPARE BASE SCHED.
cat > "$D/compare.py" <<'PY'
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
steps = sorted(gpu.get("profile", []), key=lambda p: -p.get("ms", 0))[:6]
for p in steps:
    print(f"    {p.get('ms', 0):8.3f} ms  {str(p.get('workload', p.get('name', '')))[:110]}")
sys.exit(0 if ok else 1)
PY
for pat in ${CHECK_MODELS:-det resnet18 cls rec}; do
  m=$(ls "$D"/m/*"$pat"*.onnx 2>/dev/null | head -1)
  [ -n "$m" ] || continue
  case $pat in
    cls) shape=x=1x3x48x192 ;;
    rec) shape=x=1x3x48x320 ;;
    det) shape=x=1x3x640x640 ;;
    resnet18) shape=input=1x3x224x224 ;;
  esac
  name=$(basename "$m" .onnx)
  [ $pat = resnet18 ] && pyrun -c 'import torchvision' 2>/dev/null && { bounded 90 env LD_LIBRARY_PATH="$host_ldpath" "$py" "$D/torch_resnet18.py" 2>&1 | tail -3; }
  bounded 60 "$D/bin/lathe" run --model "$m" --input "$shape" --target cpu --repeat 10 --json \
    --dump "$out/$name.cpu" > "$out/$name.cpu.json" 2> "$out/$name.cpu.err" || { rc=1; cat "$out/$name.cpu.err"; continue; }
  scheds=${GPU_SCHEDS:-default rule tf32}
  # TUNE_TRIALS > 0: the models named in TUNE_MODELS (default cls) tuned on the GPU first
  # (`lathe tune --model --target cuda`, at most TUNE_PER_TASK trials a task), then run on
  # their records ("tuned").
  if [ "${TUNE_TRIALS:-0}" -gt 0 ] && [[ " ${TUNE_MODELS:-cls} " == *" $pat "* ]]; then
    bounded 180 "$D/bin/lathe" tune --model "$m" --input "$shape" --target "${LATHE_GPU_TARGET:-cuda}" \
      --trials "$TUNE_TRIALS" --max-trials-per-task "${TUNE_PER_TASK:-8}" --db "$out/gpu-tune.db" \
      > "$out/$name.tune.log" 2>&1 || rc=1
    grep -E '^(objective|trials|stored)' "$out/$name.tune.log"
    scheds="$scheds tuned"
  fi
  for sched in $scheds; do
    flag=; [ $sched = default ] && flag=--default-schedules
    [ $sched = tf32 ] && flag="--gpu-math tf32"
    [ $sched = tuned ] && flag="--db $out/gpu-tune.db"
    bounded 90 "$D/bin/lathe" run --model "$m" --input "$shape" --target "${LATHE_GPU_TARGET:-cuda}" $flag --repeat "${GPU_REPEAT:-30}" --json --profile \
      --dump "$out/$name.gpu-$sched" > "$out/$name.gpu-$sched.json" 2> "$out/$name.gpu-$sched.err" ||
      { rc=1; echo "FAIL: $name on the GPU ($sched): $(tail -2 "$out/$name.gpu-$sched.err")"; continue; }
    pyrun "$D/compare.py" "$out/$name" "$sched" || rc=1
  done
done
if [ -x "$D/bin/gpumodel_test" ]; then
  bounded 90 "$D/bin/gpumodel_test" --gtest_filter='*RealGpu*' > "$out/gpumodel_test.log" 2>&1 || rc=1
  grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\]' "$out/gpumodel_test.log"
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
