#!/usr/bin/env bash
# Creates the Python virtual environment that the model tests and benchmarks use as their
# references: ONNX Runtime (PyPI `onnxruntime`: outputs and speed), OpenVINO (PyPI `openvino`:
# the fastest CPU runtime, the speed to beat) and the PP-OCR models that the PyPI wheel
# `rapidocr-onnxruntime` 1.4.x carries in its models/ folder (installed without its
# dependencies: only the .onnx files are used). The system Python stays clean; the venv
# sees the system's python3-onnx and python3-numpy.
# Usage: scripts/model-venv.sh [BUILD_DIR]   (default: build); prints the venv's python.
# Idempotent: a venv that already has every package is left alone. OpenVINO is optional for
# the tests (they skip its comparisons without it): a failed install only warns.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
venv="$build/model-venv"
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
  # Debian's python3 (not one earlier on PATH): its site-packages hold python3-onnx.
  syspy=/usr/bin/python3
  [[ -x "$syspy" ]] || syspy=python3
  "$syspy" -m venv --system-site-packages "$venv" >&2
fi
if ! "$py" -c "import onnxruntime" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check "onnxruntime==1.31.*" >&2
fi
if ! "$py" -c "import openvino" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check "openvino==2026.*" >&2 ||
    echo "model-venv: note: openvino did not install; OpenVINO figures will be missing" >&2
fi
if ! "$py" -c "import rapidocr_onnxruntime" 2>/dev/null && \
   [[ -z "$(ls "$venv"/lib/python3*/site-packages/rapidocr_onnxruntime/models/*.onnx 2>/dev/null)" ]]; then
  "$py" -m pip install -q --disable-pip-version-check --no-deps "rapidocr-onnxruntime==1.4.*" >&2
fi
echo "$py"
