#!/usr/bin/env bash
# PP-OCR (the models that the PyPI wheel rapidocr-onnxruntime 1.4.x carries) end to end:
# `lathe run` against ONNX Runtime on the same inputs (max error <= 1e-3 of the largest
# reference magnitude) for cls 1x3x48x192, rec 1x3x48x320 and det 1x3x640x640; cls built with
# `lathe build --model` and run from a plain C program; a dynamic input without --input is an
# error. Usage: ppocr_e2e_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
lathe=$build/bin/lathe
py=$(bash "$src/scripts/model-venv.sh" "$build" 2>/dev/null) || { echo "SKIP: no venv (PyPI unreachable?)"; exit 77; }
models=$("$py" -c "import os, rapidocr_onnxruntime as r; print(os.path.dirname(r.__file__) + '/models')" 2>/dev/null) ||
  models=$(ls -d "$build"/model-venv/lib/python3*/site-packages/rapidocr_onnxruntime/models)
ref="$py $src/bench/ort_reference.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
for m in cls:ch_ppocr_mobile_v2.0_cls_infer.onnx:1x3x48x192 rec:ch_PP-OCRv4_rec_infer.onnx:1x3x48x320 \
         det:ch_PP-OCRv4_det_infer.onnx:1x3x640x640; do
  IFS=: read -r name file shape <<< "$m"
  feed=$($ref inputs "$models/$file" --input x=$shape --out "$tmp/$name.in")
  $ref run "$models/$file" --input x=$shape --feed $feed --dump "$tmp/$name.ort" --repeat 1 > /dev/null
  "$lathe" run --model "$models/$file" --input x=$shape --feed $feed --dump "$tmp/$name.lathe" --repeat 1
  if $ref compare "$tmp/$name.ort" "$tmp/$name.lathe"; then echo "ok: $name"; else echo "FAIL: $name"; fails=$((fails + 1)); fi
done
"$lathe" build --model "$models/ch_ppocr_mobile_v2.0_cls_infer.onnx" --input x=1x3x48x192 --out "$tmp/cls.so"
mkdir -p "$tmp/so"
if "$build/bin/run_model_so" "$tmp/cls.so" "$tmp/cls.in/x.bin" "$tmp/so" && $ref compare "$tmp/cls.ort" "$tmp/so"; then
  echo "ok: cls model.so from C"
else
  echo "FAIL: cls model.so from C"; fails=$((fails + 1))
fi
err=$("$lathe" model tasks --model "$models/ch_ppocr_mobile_v2.0_cls_infer.onnx" 2>&1); rc=$?
if [[ $rc == 2 && $err == *"--input x=SHAPE"* ]]; then echo "ok: dynamic input needs --input"; else echo "FAIL: $err"; fails=$((fails + 1)); fi
echo "$fails failed"
[[ $fails == 0 ]]
