#!/usr/bin/env bash
# The model commands end to end on small real files (ONNX's conformance models from Debian's
# libonnx-testdata): lathe model tasks, lathe run (--feed/--dump) and lathe build --model, the
# built library run from a plain C program, compared with the expected outputs; and the errors
# (malformed file, unsupported op, wrong shapes, hostile files: zero strides, overflowing
# dims, a Range of 10^12 elements): exit 2, a message naming the problem and no address,
# nothing written. Usage: model_cli_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
lathe=$build/bin/lathe
runso=$build/bin/run_model_so
node=/usr/share/libonnx-testdata/data/node
py=/usr/bin/python3
if [[ ! -d $node ]] || ! $py -c "import onnx, numpy" 2>/dev/null; then
  echo "SKIP: needs libonnx-testdata, python3-onnx and python3-numpy"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

# A .pb TensorProto to raw float32, and a comparison of raw outputs with a .pb.
$py - "$tmp" <<'PY'
import sys, onnx, numpy as np
from onnx import numpy_helper
case = "/usr/share/libonnx-testdata/data/node/test_averagepool_2d_pads"
t = onnx.TensorProto(); t.ParseFromString(open(case + "/test_data_set_0/input_0.pb", "rb").read())
numpy_helper.to_array(t).astype("<f4").tofile(sys.argv[1] + "/in.bin")
PY
cmp_out() {  # cmp_out RAW_FILE EXPECTED_PB
  $py - "$1" "$2" <<'PY'
import sys, onnx, numpy as np
from onnx import numpy_helper
t = onnx.TensorProto(); t.ParseFromString(open(sys.argv[2], "rb").read())
ref = numpy_helper.to_array(t).astype(np.float64).ravel()
got = np.fromfile(sys.argv[1], dtype="<f4").astype(np.float64)
err = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30) if got.size == ref.size else 1
print("max error / max |ref| =", err); sys.exit(0 if err <= 1e-3 else 1)
PY
}
model=$node/test_averagepool_2d_pads/model.onnx
expected=$node/test_averagepool_2d_pads/test_data_set_0/output_0.pb

out=$("$lathe" model tasks --model "$model" --json)
check "model tasks --json lists the pool2d task" \
  "grep -q '\"workload\":\"pool2d:c=3,count_include_pad=0,h=28,kind=avg' <<< '$out'"
check "run --feed --dump matches ONNX's expected output" \
  "'$lathe' run --model '$model' --feed x='$tmp/in.bin' --dump '$tmp/run' --repeat 3 --json > '$tmp/run.json' && cmp_out '$tmp/run/0.bin' '$expected'"
check "run --json prints latency_ms and outputs" \
  "grep -q '\"latency_ms\"' '$tmp/run.json' && grep -q '\"file\":\"$tmp/run/0.bin\"' '$tmp/run.json'"
# --profile: each step's time and, where the database has them, what the steps' records add
# up to (the tuner's objective), against the steps without one.
"$lathe" tune --model "$model" --db "$tmp/t.db" --trials 4 --seed 1 > /dev/null 2>&1
check "run --profile --json adds up the records of the tuned steps" \
  "'$lathe' run --model '$model' --db '$tmp/t.db' --profile --repeat 2 --json > '$tmp/prof.json' && $py -c \"import json; d = json.load(open('$tmp/prof.json')); assert d['steps_without_record'] == 0 and d['records_ms'] > 0 and d['profile_steps_ms'] > 0, d\""
check "... and counts the steps that run default schedules" \
  "'$lathe' run --model '$model' --default-schedules --profile --repeat 2 --json > '$tmp/prof0.json' && $py -c \"import json; d = json.load(open('$tmp/prof0.json')); assert d['records_ms'] == 0 and d['steps_without_record'] == d['steps'] > 0, d\""
# A record the current rules were never raced against is flagged (it may predate a faster
# rule): the tune measured the rule first, so of its records alone in a database, exactly one
# (the rule's own) is not flagged, and the whole database is not.
check "run --json flags no record when the database measured the rules" \
  "'$lathe' run --model '$model' --db '$tmp/t.db' --repeat 1 --json | $py -c \"import json, sys; d = json.load(sys.stdin); assert d['kernels_rules_not_raced'] == 0, d\""
"$lathe" db export --db "$tmp/t.db" "$tmp/all.jsonl" > /dev/null
raced=0 unraced=0
while IFS= read -r line; do
  rm -f "$tmp/one.db"
  { head -1 "$tmp/all.jsonl"; printf '%s\n' "$line"; } > "$tmp/one.jsonl"
  "$lathe" db import --db "$tmp/one.db" "$tmp/one.jsonl" > /dev/null
  n=$("$lathe" run --model "$model" --db "$tmp/one.db" --repeat 1 --json |
    $py -c "import json, sys; print(json.load(sys.stdin)['kernels_rules_not_raced'])")
  if [[ $n == 0 ]]; then
    raced=$((raced + 1))
  else
    unraced=$((unraced + 1)) && cp "$tmp/one.db" "$tmp/unraced.db"
  fi
done < <(tail -n +2 "$tmp/all.jsonl")
check "a record alone is flagged unless it is the rule's own (1 of $((raced + unraced)): $raced)" \
  "[[ $raced == 1 && $unraced -ge 1 ]]"
check "... and run says so in words" \
  "'$lathe' run --model '$model' --db '$tmp/unraced.db' --repeat 1 | grep -q 'never measured against'"
check "build --model writes a library a C program runs" \
  "'$lathe' build --model '$model' --out '$tmp/m.so' --schedule default > /dev/null && mkdir -p '$tmp/so' && '$runso' '$tmp/m.so' '$tmp/in.bin' '$tmp/so' > /dev/null && cmp_out '$tmp/so/0.bin' '$expected'"
check "the library needs only libc and libm" \
  "! readelf -d '$tmp/m.so' | grep NEEDED | grep -v -e 'libc.so.6' -e 'libm.so.6'"

# Errors: exit 2, the problem named, nothing written.
expect_exit2() {  # expect_exit2 DESCRIPTION PATTERN COMMAND...
  local desc=$1 pat=$2 err rc
  shift 2
  err=$("$@" 2>&1)
  rc=$?
  if [[ $rc == 2 && $err == *"$pat"* ]]; then
    echo "ok: $desc"
  else
    echo "FAIL: $desc (exit $rc: $err)"
    fails=$((fails + 1))
  fi
}
echo "not a model" > "$tmp/bad.onnx"
expect_exit2 "a malformed file exits 2" "not an ONNX model" \
  "$lathe" build --model "$tmp/bad.onnx" --out "$tmp/bad.so"
check "... and writes nothing" "[[ ! -e '$tmp/bad.so' ]]"
expect_exit2 "build --model for a GPU target exits 2 pointing at lathe run" \
  "run a model on a GPU with \`lathe run --model F --target cuda\`" \
  "$lathe" build --model "$model" --target cuda --out "$tmp/gpu.so"
check "... and writes nothing" "[[ ! -e '$tmp/gpu.so' ]]"
expect_exit2 "an unsupported op exits 2 naming the node and the op" \
  "node 'LogSoftmax_0' (LogSoftmax): operator LogSoftmax is not supported" \
  "$lathe" run --model "$node/test_logsoftmax_axis_0/model.onnx"
expect_exit2 "a shape that does not match the model exits 2" "does not match the model" \
  "$lathe" model tasks --model "$model" --input x=1x3x28x29
expect_exit2 "an unknown --layout exits 2 naming the choices" "must be blocked, nchw or nchw{b}c" \
  "$lathe" run --model "$model" --layout nhwc
check "run --layout nchw4c matches ONNX's expected output" \
  "'$lathe' run --model '$model' --layout nchw4c --feed x='$tmp/in.bin' --dump '$tmp/run4' --repeat 1 > /dev/null && cmp_out '$tmp/run4/0.bin' '$expected'"
check "run --layout blocked:no-winograd,no-separable matches ONNX's expected output" \
  "'$lathe' run --model '$model' --layout blocked:no-winograd,no-separable --feed x='$tmp/in.bin' --dump '$tmp/runm' --repeat 1 > /dev/null && cmp_out '$tmp/runm/0.bin' '$expected'"
expect_exit2 "an unknown --layout modifier exits 2 naming the modifiers" \
  "unknown modifier 'fast' (blocked layouts take no-winograd and no-separable" \
  "$lathe" run --model "$model" --layout blocked:fast
expect_exit2 "a --feed file of the wrong size exits 2" "holds 12 bytes" \
  "$lathe" run --model "$model" --feed x="$tmp/bad.onnx"

# Hostile files (issue 31): exit 2 with the problem named, never a signal or an address.
$py - "$tmp" <<'PY'
import sys, onnx
from onnx import helper as h, TensorProto as T
d = sys.argv[1]
def save(name, nodes, inits, in_shape=(1, 1, 8, 8), rank=4):
    g = h.make_graph(nodes, name, [h.make_tensor_value_info("x", T.FLOAT, list(in_shape))],
                     [h.make_tensor_value_info("y", T.FLOAT, ["d%d" % i for i in range(rank)])],
                     initializer=inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), d + "/" + name + ".onnx")
w = h.make_tensor("w", T.FLOAT, [1, 1, 3, 3], [0.1] * 9)
save("stride0", [h.make_node("Conv", ["x", "w"], ["y"], strides=[0, 1])], [w])
big = T(); big.name = "b"; big.data_type = T.FLOAT; big.dims.extend([2**62 + 1, 4]); big.raw_data = bytes(16)
save("wrap", [h.make_node("Transpose", ["b"], ["t"], perm=[1, 0]), h.make_node("Add", ["x", "t"], ["y"])],
     [big], in_shape=(4, 1), rank=2)
i64 = lambda n, v: h.make_tensor(n, T.INT64, [], [v])
save("range", [h.make_node("Range", ["s", "l", "dl"], ["r"]), h.make_node("Cast", ["r"], ["rf"], to=1),
               h.make_node("Add", ["x", "rf"], ["y"])],
     [i64("s", 0), i64("l", 10**12), i64("dl", 1)], in_shape=(1,), rank=1)
PY
expect_hostile() {  # expect_hostile DESCRIPTION PATTERN MODEL
  local err rc
  err=$("$lathe" model tasks --model "$3" 2>&1)
  rc=$?
  if [[ $rc == 2 && $err == *"$2"* && $err != *0x* ]]; then
    echo "ok: $1"
  else
    echo "FAIL: $1 (exit $rc: ${err:0:300})"
    fails=$((fails + 1))
  fi
}
expect_hostile "a Conv with a zero stride exits 2" "stride 0 in attribute 'strides' (must be >= 1)" \
  "$tmp/stride0.onnx"
expect_hostile "an initializer whose dims wrap exits 2" "more than 2147483648 (2^31) elements" \
  "$tmp/wrap.onnx"
expect_hostile "a Range of 10^12 elements exits 2" "a Range of 1e+12 elements" "$tmp/range.onnx"
echo "$fails failed"
[[ $fails == 0 ]]
