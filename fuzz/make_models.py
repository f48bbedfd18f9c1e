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


def separable_block(path):
    """A MobileNet block at 16x16: a depthwise 3x3 conv, HardSwish, a 1x1 conv and ReLU, which the
    blocked layout fuses into one sepconv2d kernel (model/separable.cc)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "dw.w", "dw.b"], ["d"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["d"], ["h"]),
        helper.make_node("Conv", ["h", "pw.w", "pw.b"], ["p"]),
        helper.make_node("Relu", ["p"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "separable_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        [init("dw.w", (8, 1, 3, 3)), init("dw.b", (8,)), init("pw.w", (16, 8, 1, 1)),
         init("pw.b", (16,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


separable_block(os.path.join(out, "separable_block.onnx"))
