#!/bin/bash
# Packs what the GPU checks need (scripts/gpu-host-check.sh) into DIR for a GPU host that has
# the NVIDIA driver and a CUDA 13 toolkit (NVRTC, cuBLAS; cuDNN optional) but none of lathe's
# build dependencies: the binaries and every shared library they load beyond glibc/libstdc++
# and NVRTC, xz-compressed. Built on Debian 12; a host with a newer glibc runs them.
#
#   scripts/gpu-host-bundle.sh [--build DIR] [--out DIR] [--set tests|service|all]
#
# tests: cuda_test, measure_test, gpumodel_test, lathe, lathe-measure, bench_cuda, and the
# PP-OCR models of the model venv (build/model-venv, scripts/model-venv.sh) when it is there;
# service: lathe, lathed, lathe-worker, lathe-measure (about 62 MB); all: both (larger).
set -euo pipefail
build=build out=gpu-bundle set=tests
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) set=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
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
# Non-system libraries: everything ldd resolves except glibc, libstdc++/libgcc and NVRTC
# (the host's toolkit provides the NVRTC that matches its driver).
for b in $bins; do ldd "$build/bin/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so|ld-linux|nvrtc' |
  while read -r f; do cp -L "$f" "$stage/l/"; done
tar -C "$stage" -cf - bin l m | xz -T0 -6 > "$out/lathe-gpu-$set.tar.xz"
cp "$(dirname "$0")/gpu-host-check.sh" "$out/"
ls -la "$out"
