#!/usr/bin/env bash
# Every bench model's GPU kernels proven on the GPU emulator, without a GPU:
#   1. each model run whole with `lathe run --target cuda-emu:sm_90` (every step the CUDA
#      kernel its GPU schedule generates: the GPU space's rule-picked one, or the default with
#      --default-schedules) and compared with ONNX Runtime on the same inputs (<= 1e-3 of the
#      largest reference magnitude);
#   2. with --verify, each of its GPU tasks (`lathe model tasks --target cuda:sm_90`) checked
#      by `lathe verify --target cuda:sm_90 --schedule rule` and `--schedule default` (NVRTC
#      and ptxas's figures against sm_90's limits, then the emulator against the reference).
# Models: cls, rec, det (PP-OCR, the rapidocr-onnxruntime wheel of scripts/model-venv.sh),
# resnet18, bert (bench/make_models.py). Prints one line per model and per failure; exit 1
# when any fails. Usage:
#   scripts/gpu-emu-models.sh [--build DIR] [--models cls,rec,det,resnet18,bert] [--verify]
#                             [--default-schedules] [--arch sm_90]
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build
models=cls,rec,det,resnet18,bert
verify=0
default=()
arch=sm_90
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --models) models=$2; shift 2 ;;
    --verify) verify=1; shift ;;
    --default-schedules) default=(--default-schedules); shift ;;
    --arch) arch=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
lathe=$build/bin/lathe
py=$(bash "$src/scripts/model-venv.sh" "$build") || { echo "no model venv" >&2; exit 1; }
ocr=$(ls -d "$build"/model-venv/lib/python3*/site-packages/rapidocr_onnxruntime/models | head -1)
ref="$py $src/bench/ort_reference.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
for name in ${models//,/ }; do
  case $name in
    cls) file=$ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx; shape=x=1x3x48x192 ;;
    rec) file=$ocr/ch_PP-OCRv4_rec_infer.onnx; shape=x=1x3x48x320 ;;
    det) file=$ocr/ch_PP-OCRv4_det_infer.onnx; shape=x=1x3x640x640 ;;
    resnet18|bert)
      [[ -f $tmp/resnet18.onnx ]] || "$py" "$src/bench/make_models.py" "$tmp" > /dev/null
      if [[ $name == resnet18 ]]; then file=$tmp/resnet18.onnx; shape=input=1x3x224x224
      else file=$tmp/bert_layer.onnx; shape=input=1x128x768; fi ;;
    *) echo "unknown model $name" >&2; exit 2 ;;
  esac
  # The models of make_models.py name their input in the file; ask ONNX Runtime.
  if [[ $name == resnet18 || $name == bert ]]; then
    input=$("$py" -c "import onnx,sys; print(onnx.load(sys.argv[1]).graph.input[0].name)" "$file")
    shape=$input=${shape#*=}
  fi
  feed=$($ref inputs "$file" --input "$shape" --out "$tmp/$name.in")
  $ref run "$file" --input "$shape" --feed $feed --dump "$tmp/$name.ort" --repeat 1 > /dev/null
  start=$SECONDS
  if "$lathe" run --model "$file" --input "$shape" --target "cuda-emu:$arch" "${default[@]}" \
       --feed $feed --dump "$tmp/$name.emu" --repeat 1 --json > "$tmp/$name.json" 2> "$tmp/$name.err" &&
     err=$($ref compare "$tmp/$name.ort" "$tmp/$name.emu" | tail -1); then
    info=$("$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"{j['kernels']} kernels, {j['steps']} steps, compiled in {j['compile_s']:.1f} s, {j['latency_ms']/1e3:.1f} s a run\")" "$tmp/$name.json")
    echo "ok: $name whole on cuda-emu:$arch: $info; $err ($((SECONDS - start)) s)"
  else
    echo "FAIL: $name whole on cuda-emu:$arch: $(tail -3 "$tmp/$name.err") $($ref compare "$tmp/$name.ort" "$tmp/$name.emu" 2>&1 | tail -1)"
    fails=$((fails + 1))
  fi
  if [[ $verify == 1 ]]; then
    "$lathe" model tasks --model "$file" --input "$shape" --target "cuda:$arch" --json |
      "$py" -c "import json,sys; [print(t['workload']) for t in json.load(sys.stdin)['tasks']]" > "$tmp/$name.tasks"
    ok=0; total=0
    while read -r w; do
      for schedule in rule default; do
        total=$((total + 1))
        if out=$("$lathe" verify --target "cuda:$arch" --workload "$w" --schedule $schedule 2>&1); then
          ok=$((ok + 1))
        else
          echo "FAIL: verify $schedule $w: $(echo "$out" | tail -2)"
          fails=$((fails + 1))
        fi
      done
    done < "$tmp/$name.tasks"
    echo "$name: $ok of $total GPU task schedules (rule and default) verified for $arch"
  fi
done
echo "$fails failed"
[[ $fails == 0 ]]
