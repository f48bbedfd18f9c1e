#!/usr/bin/env bash
# PP-OCR cls (ch_ppocr_mobile_v2.0_cls_infer.onnx, 1x3x48x192, from the PyPI wheel
# rapidocr-onnxruntime 1.4.x) run whole on a GPU target with `lathe run --target T` and
# compared with ONNX Runtime on the same inputs (max |lathe - ort| <= 1e-3 of max |ort|);
# --json and --profile checked on the way. T is cuda-emu:sm_90 (the GPU emulator: every step
# a generated CUDA kernel run on this CPU) or cuda (GPU 0 through the driver).
# Exit 77 (skip) without the model venv, or, for cuda, without a GPU.
# Usage: ppocr_cls_gpu_test.sh BUILD_DIR SOURCE_DIR TARGET
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
target=$3
lathe=$build/bin/lathe
if [[ $target == cuda || $target == cuda:* ]] && ! ls /dev/nvidia0 > /dev/null 2>&1; then
  echo "SKIP: no GPU here (/dev/nvidia0 is absent)"; exit 77
fi
py=$(bash "$src/scripts/model-venv.sh" "$build" 2>/dev/null) || { echo "SKIP: no model venv (PyPI unreachable?)"; exit 77; }
models=$(ls -d "$build"/model-venv/lib/python3*/site-packages/rapidocr_onnxruntime/models 2>/dev/null | head -1)
model=$models/ch_ppocr_mobile_v2.0_cls_infer.onnx
[[ -f $model ]] || { echo "SKIP: no PP-OCR cls model in the venv"; exit 77; }
ref="$py $src/bench/ort_reference.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
feed=$($ref inputs "$model" --input x=1x3x48x192 --out "$tmp/in")
$ref run "$model" --input x=1x3x48x192 --feed $feed --dump "$tmp/ort" --repeat 1 > /dev/null || { echo "FAIL: onnxruntime"; exit 1; }
start=$SECONDS
if ! "$lathe" run --model "$model" --input x=1x3x48x192 --target "$target" --feed $feed \
     --dump "$tmp/lathe" --repeat 1 --json --profile > "$tmp/run.json" 2> "$tmp/run.err"; then
  cat "$tmp/run.err"; echo "FAIL: lathe run --target $target"; exit 1
fi
echo "lathe run --target $target: $((SECONDS - start)) s wall (compile and runs)"
if $ref compare "$tmp/ort" "$tmp/lathe"; then echo "ok: cls on $target matches onnxruntime"; else echo "FAIL: cls on $target"; fails=$((fails + 1)); fi
# The report: target and device named, every step a kernel with its share of the time.
if python3 - "$tmp/run.json" "$target" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["target"] == sys.argv[2], j["target"]
assert j["device"], "no device"
assert j["steps"] == len(j["profile"]) and j["steps"] > 50, (j["steps"], len(j["profile"]))
assert abs(sum(p["share"] for p in j["profile"]) - 1) < 1e-6
assert j["outputs"][0]["shape"] == [1, 2], j["outputs"]
print(f"ok: json: {j['kernels']} kernels in {j['steps']} steps on {j['device']}, "
      f"{j['latency_ms']:.1f} ms, compiled in {j['compile_s']:.1f} s")
PY
then :; else echo "FAIL: --json/--profile report"; fails=$((fails + 1)); fi
echo "$fails failed"
[[ $fails == 0 ]]
