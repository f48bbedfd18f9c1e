#!/usr/bin/env bash
# The main job: build lathe, then
#  1. tune a real model from an empty database on this machine (PP-OCR cls, the text-direction
#     classifier that the PyPI wheel rapidocr-onnxruntime carries) with the embedded tuner, and
#     end with the table a user wants: lathe untuned (default schedules) and tuned against ONNX
#     Runtime and OpenVINO measured in the same run, milliseconds and ratios, outputs checked
#     against ONNX Runtime's (bench/bench_models.py);
#  2. tune one operator into the default database ($LATHE_DB or ~/.local/share/lathe/tuning.db)
#     and time the shipped hand-written GEMM trace next to OpenBLAS and oneDNN.
# Arguments are passed to the operator's `lathe tune` (default: --workload
# matmul:m=512,n=512,k=512 --trials 300). LATHE_MAIN_MODEL_TRIALS (default 800) is the model's
# budget, LATHE_MAIN_MODEL_PER_TASK (default 30) each task's cap; LATHE_MAIN_MODEL=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [[ "${LATHE_MAIN_MODEL:-1}" != "0" ]]; then
  py=$(bash scripts/model-venv.sh build)
  models=$(ls -d build/model-venv/lib/python3*/site-packages/rapidocr_onnxruntime/models)
  work=build/main-job
  mkdir -p "$work"
  db="$work/cls.db"
  rm -f "$db" "$db-wal" "$db-shm"
  echo "== tuning PP-OCR cls (1x3x48x192) from an empty database: $db"
  start=$(date +%s)
  ./build/bin/lathe tune --model "$models/ch_ppocr_mobile_v2.0_cls_infer.onnx" --input x=1x3x48x192 \
    --trials "${LATHE_MAIN_MODEL_TRIALS:-800}" --max-trials-per-task "${LATHE_MAIN_MODEL_PER_TASK:-30}" \
    --db "$db"
  echo "== tuned in $(($(date +%s) - start)) s; lathe (untuned, tuned), ONNX Runtime and OpenVINO:"
  "$py" bench/bench_models.py --lathe build/bin/lathe --models cls --db "$db" --rounds 5 \
    --work "$work" | grep -v '^\[{'
fi
args=("$@")
if ((${#args[@]} == 0)); then
  args=(--workload matmul:m=512,n=512,k=512 --trials 300 --plot build/tuning-curve.svg)
fi
./build/bin/lathe tune "${args[@]}"
./build/bin/bench_gemm --trace examples/traces/matmul-1024.json
