#!/usr/bin/env bash
# The GPU path's whole loop without a GPU: `lathe tune --model` (PP-OCR cls) with --target
# cuda-emu:sm_90 measures GPU candidates on the emulator into a fresh database (device class
# cuda-emu:sm_90), then `lathe run --target cuda-emu:sm_90 --db` builds the tuned kernels from
# those records and still matches ONNX Runtime. Exit 77 (skip) without the model venv.
# Usage: emu_tune_run_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
lathe=$build/bin/lathe
py=$(bash "$src/scripts/model-venv.sh" "$build" 2>/dev/null) || { echo "SKIP: no model venv"; exit 77; }
model=$(ls "$build"/model-venv/lib/python3*/site-packages/rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx 2>/dev/null | head -1)
[[ -f $model ]] || { echo "SKIP: no PP-OCR cls model in the venv"; exit 77; }
ref="$py $src/bench/ort_reference.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# A few trials for 60 tasks: most tasks keep no record, which tune reports (and exits 1 for);
# what matters here is that the measured ones ran on the emulator and land in the database.
"$lathe" tune --model "$model" --input x=1x3x48x192 --target cuda-emu:sm_90 --db "$tmp/t.db" \
  --trials 8 --batch 4 --min-repeat-ms 1 --remeasure-top 0 --json > "$tmp/tune.json" 2> "$tmp/tune.err" ||
  grep -q "have no candidate that ran correctly" "$tmp/tune.err" ||
  { tail -5 "$tmp/tune.err"; echo "FAIL: lathe tune --target cuda-emu:sm_90"; exit 1; }
if python3 - "$tmp/tune.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["device_class"] == "cuda-emu:sm_90", j["device_class"]
assert j["trials"] >= 8 and not j["errors"], (j["trials"], j["errors"])
print(f"ok: tuned on the emulator: {j['trials']} trials over {len(j.get('tasks', []))} tasks, "
      f"errors {j['errors']}")
PY
then :; else echo "FAIL: tune report"; fails=$((fails + 1)); fi
feed=$($ref inputs "$model" --input x=1x3x48x192 --out "$tmp/in")
$ref run "$model" --input x=1x3x48x192 --feed $feed --dump "$tmp/ort" --repeat 1 > /dev/null
"$lathe" run --model "$model" --input x=1x3x48x192 --target cuda-emu:sm_90 --db "$tmp/t.db" \
  --feed $feed --dump "$tmp/lathe" --repeat 1 --json > "$tmp/run.json" || { echo "FAIL: lathe run"; exit 1; }
from=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['kernels_from_records'])" "$tmp/run.json")
if [[ $from -ge 1 ]]; then echo "ok: $from kernels from the emulator's records"; else echo "FAIL: no kernel from a record"; fails=$((fails + 1)); fi
if $ref compare "$tmp/ort" "$tmp/lathe"; then echo "ok: tuned cls on the emulator matches onnxruntime"; else echo "FAIL: tuned cls"; fails=$((fails + 1)); fi
echo "$fails failed"
[[ $fails == 0 ]]
