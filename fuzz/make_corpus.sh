#!/usr/bin/env bash
# Assembles the seed corpora of the fuzz targets in OUT/<target>/ from what the project and
# Debian already have:
#   fuzz_onnx_import     ONNX's conformance models (libonnx-testdata: node, simple,
#                        pytorch-converted, pytorch-operator) and the model benchmark's
#                        ResNet-18 and BERT layer at tiny widths (make_models.py)
#   fuzz_workload        every workload spec written in the tests, tools and benchmarks
#   fuzz_trace_json      examples/traces and traces the CPU search space samples for a
#                        sample of those specs (lathe_fuzz_seeds traces)
#   fuzz_jsonl_import    JSONL exports of records holding those traces, seeds/jsonl_import
#   fuzz_tuner_rpc       seeds/tuner_rpc/*.txtpb sessions in binary form
#   fuzz_dashboard_http  seeds/dashboard_http (raw requests)
# Usage: make_corpus.sh OUT SEED_TOOL (the lathe_fuzz_seeds binary).
set -euo pipefail
out=$1
seed_tool=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
# The seed tool is an ordinary program built with the sanitizers: protobuf's and gRPC's
# process-lifetime allocations are no leaks of ours.
export ASAN_OPTIONS=detect_leaks=0

rm -rf "$out"
targets=(fuzz_onnx_import fuzz_workload fuzz_trace_json fuzz_jsonl_import fuzz_tuner_rpc
         fuzz_dashboard_http)
for t in "${targets[@]}"; do mkdir -p "$out/$t"; done

# ONNX models.
testdata=/usr/share/libonnx-testdata/data
if [[ -d $testdata ]]; then
  for set in node simple pytorch-converted pytorch-operator; do
    for m in "$testdata/$set"/*/model.onnx; do
      [[ -f $m ]] && cp "$m" "$out/fuzz_onnx_import/$set-$(basename "$(dirname "$m")").onnx"
    done
  done
else
  echo "make_corpus: $testdata missing (libonnx-testdata): no conformance seeds" >&2
fi
/usr/bin/python3 "$here/make_models.py" "$out/fuzz_onnx_import" ||
  echo "make_corpus: python3-onnx missing: no model-architecture seeds" >&2

# Workload specs: the ones the sources spell out ("op:key=value,...").
specs=$(mktemp)
trap 'rm -f "$specs"' EXIT
grep -rhoE '"[a-z][a-z0-9_]*:[a-z_]+=[a-z0-9_.=,:-]*"' "$root/tests" "$root/tools" "$root/bench" \
  "$root/python" "$root/examples" 2>/dev/null | tr -d '"' | sort -u > "$specs"
n=0
while IFS= read -r s; do
  printf '%s' "$s" > "$out/fuzz_workload/$n.txt"
  n=$((n + 1))
done < "$specs"

# Traces and JSONL exports: every 8th spec (enough kinds of op, a corpus that loads fast).
cp "$root"/examples/traces/*.json "$out/fuzz_trace_json/"
sampled=$(mktemp)
awk 'NR % 8 == 1' "$specs" > "$sampled"
"$seed_tool" traces "$sampled" "$out/fuzz_trace_json" "$out/fuzz_jsonl_import"
rm -f "$sampled"
cp "$here"/seeds/jsonl_import/* "$out/fuzz_jsonl_import/"

for s in "$here"/seeds/tuner_rpc/*.txtpb; do
  "$seed_tool" session "$s" "$out/fuzz_tuner_rpc/$(basename "$s" .txtpb).bin"
done
cp "$here"/seeds/dashboard_http/* "$out/fuzz_dashboard_http/"

for t in "${targets[@]}"; do
  echo "make_corpus: $t: $(ls "$out/$t" | wc -l) seeds"
done
touch "$out/.stamp"
