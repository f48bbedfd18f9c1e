#!/usr/bin/env python3
"""Writes the ONNX seeds of fuzz_onnx_import that are real model architectures, scaled down so
that one import takes milliseconds: the model benchmark's ResNet-18 and BERT encoder layer
(bench/make_models.py) at tiny widths.

Usage: make_models.py OUT_DIR
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import make_models  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
make_models.resnet18(os.path.join(out, "resnet18_tiny.onnx"), width=4, size=32, classes=10)
make_models.bert_layer(os.path.join(out, "bert_layer_tiny.onnx"), seq=8, hidden=16, heads=2, ffn=32)
