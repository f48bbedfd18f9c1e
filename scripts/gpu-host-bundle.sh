#!/bin/bash
# Packs what the GPU checks need (scripts/gpu-host-check.sh) into DIR for a GPU host that has
# the NVIDIA driver and a CUDA 13 toolkit (NVRTC, cuBLAS; cuDNN optional) but none of lathe's
# build dependencies: the binaries and every shared library they load beyond glibc/libstdc++
# and NVRTC, xz-compressed. Built on Debian 12; a host with a newer glibc runs them.
#
#   scripts/gpu-host-bundle.sh [--build DIR] [--out DIR] [--set tests|service|all] [--lean]
#
# --lean: the libraries the GPU checks never call (oneDNN and OpenBLAS, which only the CPU
# baselines use; Z3 and ICU's data, which LLVM and libxml2 link but JIT compilation never
# reaches) are replaced by stubs that define the symbols the bundle imports from them and abort
# with a message naming the stub if one is ever called: 82 -> about 55 MB, under the 64 MiB
# that a device machine's working tree may hold.
#
# tests: cuda_test, measure_test, gpumodel_test, lathe, lathe-measure, bench_cuda, and the
# PP-OCR models of the model venv (build/model-venv, scripts/model-venv.sh) when it is there;
# service: lathe, lathed, lathe-worker, lathe-measure (about 62 MB); all: both (larger).
set -euo pipefail
build=build out=gpu-bundle set=tests lean=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) set=$2; shift 2 ;;
    --lean) lean=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "gpu-host-bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$set" in
  tests) bins="cuda_test measure_test gpumodel_test lathe lathe-measure bench_cuda" ;;
  service) bins="lathe lathed lathe-worker lathe-measure" ;;
  all) bins="cuda_test measure_test gpumodel_test lathe-measure bench_cuda lathe lathed lathe-worker" ;;
  *) echo "gpu-host-bundle: --set must be tests, service or all" >&2; exit 2 ;;
esac
for b in $bins; do
  [ -x "$build/bin/$b" ] || { echo "gpu-host-bundle: $build/bin/$b is missing: build it first" >&2; exit 1; }
done
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/l" "$stage/bin" "$stage/m" "$out"
for b in $bins; do cp "$build/bin/$b" "$stage/bin/"; done
# The models that gpu-host-check.sh runs on the GPU against the CPU (lathe run --target).
if [ "$set" != service ]; then
  for f in "$build"/model-venv/lib/python3*/site-packages/rapidocr_onnxruntime/models/*.onnx; do
    [ -f "$f" ] && cp "$f" "$stage/m/"
  done
fi
resolved() { for b in $bins; do ldd "$build/bin/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u; }
if [ $lean = 1 ]; then
  all=$(resolved)
  for soname in libdnnl.so.2 libopenblas.so.0 libz3.so.4 libicudata.so.72; do
    real=$(grep "/$soname\$" <<< "$all" || true)
    [ -n "$real" ] || continue
    # What the bundle's binaries and its other libraries import that this library defines.
    importers=$(for b in $bins; do echo "$build/bin/$b"; done; grep -v "/$soname\$" <<< "$all")
    # shellcheck disable=SC2086
    nm -D --undefined-only $importers 2>/dev/null | awk '$1 == "U" || $1 == "w" {print $2}' |
      sed 's/@.*//' | LC_ALL=C sort -u > "$stage/wanted"
    nm -D -S -t d --defined-only "$real" | awk 'NF == 4 {print $4, $3, $2 + 0} NF == 3 {print $3, $2, 0}' |
      LC_ALL=C sort -k1,1 | LC_ALL=C join - "$stage/wanted" | grep -E '^[A-Za-z_][A-Za-z0-9_]* ' |
      awk -v lib="$soname" 'BEGIN {
          print "#include <stdio.h>\n#include <stdlib.h>"
          printf "static void lathe_stub(const char* s) {\n  fprintf(stderr, \"lathe bundle: %%s of %s is a stub (gpu-host-bundle.sh --lean)\\n\", s);\n  abort();\n}\n", lib }
        $2 ~ /^[TtWiI]$/ {printf "void %s(void) { lathe_stub(\"%s\"); }\n", $1, $1; next}
        {printf "char %s[%d];\n", $1, ($3 > 0 ? $3 : 1)}' > "$stage/stub.c"
    cc -shared -fPIC -w -Wl,-soname,"$soname" -o "$stage/l/$soname" "$stage/stub.c"
    echo "gpu-host-bundle: $soname -> stub of $(grep -c '^void\|^char' "$stage/stub.c") symbols"
  done
fi
# Non-system libraries: everything ldd resolves except glibc, libstdc++/libgcc and NVRTC
# (the host's toolkit provides the NVRTC that matches its driver); with --lean, resolved with
# the stubs first, so what only the stubbed libraries needed stays behind.
LD_LIBRARY_PATH="$stage/l${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" resolved | grep -v "^$stage/" |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|ld-linux|nvrtc' |
  while read -r f; do cp -L "$f" "$stage/l/"; done
tar -C "$stage" -cf - bin l m | xz -T0 -6 > "$out/lathe-gpu-$set.tar.xz"
cp "$(dirname "$0")/gpu-host-check.sh" "$out/"
ls -la "$out"
