#!/usr/bin/env python3
"""Writes the two models of the model benchmark that no package ships, with random weights
and the shapes a PyTorch export has (python3-onnx only; no PyTorch needed):

  resnet18.onnx      torchvision's ResNet-18 at 1x3x224x224 (Conv+BatchNorm+Relu, MaxPool,
                     BasicBlocks with 1x1 stride-2 downsampling, GlobalAveragePool, Gemm)
  bert_layer.onnx    one BERT-base encoder layer at 1x128x768: Q/K/V MatMul+Add, 12 heads
                     (Reshape, Transpose), scores / 8, Softmax, context, output projection,
                     residual + LayerNorm spelled out as PyTorch exports it below opset 17,
                     FFN 768-3072-768 with GELU via Erf, residual + LayerNorm.

and, for checking that rules hold on models no one tuned them on (not in the default set):

  mobilenetv3.onnx   torchvision's MobileNetV3-Large at 1x3x224x224 as its export reads (batch
                     norms folded into the convs' biases): HardSwish, depthwise 3x3 / 5x5 at
                     strides 1 and 2, squeeze-excitation (GlobalAveragePool, 1x1 convs, Relu,
                     HardSigmoid, Mul), residual adds, the classifier's Gemms
  efficientnet_b0.onnx  EfficientNet-B0 at 1x3x224x224: SiLU spelled x * Sigmoid(x), MBConv
                     blocks (expansion 6, depthwise 3x3 / 5x5), squeeze-excitation with SiLU
                     and Sigmoid, 1x1 projection, residual adds, 1280-channel head
  regnetx_400mf.onnx  RegNetX-400MF at 1x3x224x224: grouped 3x3 convolutions of 16 channels a
                     group (2 to 24 groups), 1x1 convs, stride-2 1x1 shortcuts, residual adds
  regnetx_200mf.onnx  RegNetX-200MF alike: groups of 8 channels, 24/56/152/368 channels
  shufflenetv2.onnx  ShuffleNetV2 x1.0 at 1x3x224x224: channel Split, depthwise 3x3 at strides
                     1 and 2 without activation, Concat, channel shuffle (Reshape, Transpose,
                     Reshape), MaxPool, 1024-channel 1x1 head

Usage: make_models.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)
# IR 8 (ONNX 1.10-1.13) whatever onnx writes them: a newer onnx would stamp its own IR version,
# which the ONNX library lathe links (Debian 12's 1.13) refuses.
IR_VERSION = 8
nodes, inits = [], []


def const(name, arr):
    inits.append(numpy_helper.from_array(np.asarray(arr), name))
    return name


def node(op, inputs, name, **attrs):
    nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
    return name


def save(name, path, inp, shape, out, out_shape, opset=14):
    """The graph of `nodes` and `inits` with one input and one output, checked, to `path`."""
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info(inp, TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def conv_bn(x, cin, cout, k, stride, pad, name, relu=True):
    w = const(name + ".w", (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32))
    y = node("Conv", [x, w], name, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
    bn = [const(name + ".bn." + p, v.astype(np.float32)) for p, v in
          (("g", rng.uniform(0.5, 1.5, cout)), ("b", rng.uniform(-0.1, 0.1, cout)),
           ("m", rng.uniform(-0.1, 0.1, cout)), ("v", rng.uniform(0.5, 1.5, cout)))]
    y = node("BatchNormalization", [y] + bn, name + ".bn", epsilon=1e-5)
    return node("Relu", [y], name + ".relu") if relu else y


def resnet18(path, width=64, size=224, classes=1000):
    """ResNet-18; width, size and classes scale it down (the fuzz seeds use a tiny one)."""
    nodes.clear()
    inits.clear()
    x = conv_bn("input", 3, width, 7, 2, 3, "conv1")
    x = node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"layer{stage + 1}.{block}"
            y = conv_bn(x, cin, cout, 3, stride, 1, name + ".conv1")
            y = conv_bn(y, cout, cout, 3, 1, 1, name + ".conv2", relu=False)
            sc = conv_bn(x, cin, cout, 1, stride, 0, name + ".down", relu=False) if stride != 1 or cin != cout else x
            x = node("Relu", [node("Add", [y, sc], name + ".add")], name + ".relu")
            cin = cout
    x = node("GlobalAveragePool", [x], "avgpool")
    x = node("Flatten", [x], "flatten", axis=1)
    w = const("fc.w", (rng.standard_normal((classes, 8 * width)) * 0.03).astype(np.float32))
    b = const("fc.b", rng.uniform(-0.1, 0.1, classes).astype(np.float32))
    node("Gemm", [x, w, b], "output", transB=1)
    save("resnet18", path, "input", [1, 3, size, size], "output", [1, classes], opset=13)


def conv_b(x, cin, cout, k, stride, name, groups=1):
    """A conv with its batch norm folded into weights and bias, as an eval-mode export has it."""
    w = const(name + ".w", (rng.standard_normal((cout, cin // groups, k, k)) *
                            np.sqrt(2.0 / (cin // groups * k * k))).astype(np.float32))
    b = const(name + ".b", rng.uniform(-0.1, 0.1, cout).astype(np.float32))
    return node("Conv", [x, w, b], name, kernel_shape=[k, k], strides=[stride, stride],
                pads=[k // 2] * 4, group=groups)


def act(x, kind, name):
    if kind == "relu":
        return node("Relu", [x], name + ".relu")
    if kind == "hswish":
        return node("HardSwish", [x], name + ".hswish")
    if kind == "silu":
        return node("Mul", [x, node("Sigmoid", [x], name + ".sigmoid")], name + ".silu")
    return x


def squeeze_excite(x, c, squeezed, inner, gate, name):
    s = node("GlobalAveragePool", [x], name + ".pool")
    s = act(conv_b(s, c, squeezed, 1, 1, name + ".fc1"), inner, name + ".fc1")
    s = conv_b(s, squeezed, c, 1, 1, name + ".fc2")
    if gate == "hsigmoid":
        s = node("HardSigmoid", [s], name + ".gate", alpha=1.0 / 6, beta=0.5)
    else:
        s = node("Sigmoid", [s], name + ".gate")
    return node("Mul", [x, s], name + ".scale")


def inverted_residual(x, cin, exp, cout, k, stride, se, nl, name, se_squeezed, se_inner, se_gate):
    y = x
    if exp != cin:
        y = act(conv_b(y, cin, exp, 1, 1, name + ".expand"), nl, name + ".expand")
    y = act(conv_b(y, exp, exp, k, stride, name + ".dw", groups=exp), nl, name + ".dw")
    if se:
        y = squeeze_excite(y, exp, se_squeezed(exp, cin), se_inner, se_gate, name + ".se")
    y = conv_b(y, exp, cout, 1, 1, name + ".project")
    return node("Add", [y, x], name + ".add") if stride == 1 and cin == cout else y


def classifier(x, cin, classes):
    """Global average pool, flatten and a Gemm to `classes` logits named "output"."""
    x = node("Flatten", [node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    w = const("fc.w", (rng.standard_normal((classes, cin)) * 0.03).astype(np.float32))
    b = const("fc.b", rng.uniform(-0.1, 0.1, classes).astype(np.float32))
    return node("Gemm", [x, w, b], "output", transB=1)


def mobilenetv3(path, size=224, classes=1000):
    nodes.clear()
    inits.clear()
    x = act(conv_b("input", 3, 16, 3, 2, "stem"), "hswish", "stem")
    # (kernel, expanded, out, squeeze-excite, nonlinearity, stride): torchvision's Large
    blocks = [(3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
              (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
              (3, 240, 80, False, "hswish", 2), (3, 200, 80, False, "hswish", 1),
              (3, 184, 80, False, "hswish", 1), (3, 184, 80, False, "hswish", 1),
              (3, 480, 112, True, "hswish", 1), (3, 672, 112, True, "hswish", 1),
              (5, 672, 160, True, "hswish", 2), (5, 960, 160, True, "hswish", 1),
              (5, 960, 160, True, "hswish", 1)]
    cin = 16
    for i, (k, exp, cout, se, nl, stride) in enumerate(blocks):
        # torchvision: the squeeze is the expanded width / 4 rounded to a multiple of 8
        x = inverted_residual(x, cin, exp, cout, k, stride, se, nl, f"features.{i + 1}",
                              lambda e, c: max(8, int(e / 4 + 4) // 8 * 8), "relu", "hsigmoid")
        cin = cout
    x = act(conv_b(x, 160, 960, 1, 1, "last"), "hswish", "last")
    x = node("Flatten", [node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    w1 = const("fc1.w", (rng.standard_normal((1280, 960)) * 0.03).astype(np.float32))
    b1 = const("fc1.b", rng.uniform(-0.1, 0.1, 1280).astype(np.float32))
    x = act(node("Gemm", [x, w1, b1], "fc1", transB=1), "hswish", "fc1")
    w2 = const("fc2.w", (rng.standard_normal((classes, 1280)) * 0.03).astype(np.float32))
    b2 = const("fc2.b", rng.uniform(-0.1, 0.1, classes).astype(np.float32))
    node("Gemm", [x, w2, b2], "output", transB=1)
    save("mobilenetv3", path, "input", [1, 3, size, size], "output", [1, classes])


def efficientnet_b0(path, size=224, classes=1000):
    nodes.clear()
    inits.clear()
    x = act(conv_b("input", 3, 32, 3, 2, "stem"), "silu", "stem")
    # (expansion, kernel, stride, out channels, repeats)
    stages = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    cin, n = 32, 0
    for e, k, s, cout, repeats in stages:
        for r in range(repeats):
            # the squeeze is a quarter of the block's input channels
            x = inverted_residual(x, cin, cin * e, cout, k, s if r == 0 else 1, True, "silu",
                                  f"blocks.{n}", lambda exp, c: max(1, c // 4), "silu", "sigmoid")
            cin, n = cout, n + 1
    x = act(conv_b(x, 320, 1280, 1, 1, "head"), "silu", "head")
    classifier(x, 1280, classes)
    save("efficientnet_b0", path, "input", [1, 3, size, size], "output", [1, classes])


def regnetx(path, name, widths, depths, group, size=224, classes=1000):
    """pycls's RegNetX: a 32-channel stem, stages of `widths` x `depths` blocks (1x1, grouped
    3x3 of `group` channels a group, 1x1, residual), the first of each at stride 2."""
    nodes.clear()
    inits.clear()
    x = act(conv_b("input", 3, 32, 3, 2, "stem"), "relu", "stem")
    cin = 32
    for si, (width, depth) in enumerate(zip(widths, depths)):
        for b in range(depth):
            stride, blk = (2 if b == 0 else 1), f"s{si + 1}.b{b + 1}"
            y = act(conv_b(x, cin, width, 1, 1, blk + ".a"), "relu", blk + ".a")
            y = act(conv_b(y, width, width, 3, stride, blk + ".b", groups=width // group), "relu", blk + ".b")
            y = conv_b(y, width, width, 1, 1, blk + ".c")
            short = conv_b(x, cin, width, 1, stride, blk + ".proj") if stride != 1 or cin != width else x
            x = act(node("Add", [y, short], blk + ".add"), "relu", blk)
            cin = width
    classifier(x, cin, classes)
    save(name, path, "input", [1, 3, size, size], "output", [1, classes])


def shufflenetv2(path, size=224, classes=1000):
    """torchvision's ShuffleNetV2 x1.0: stages of 4/8/4 units at 116/232/464 channels."""
    nodes.clear()
    inits.clear()

    def shuffle(x, c, hw, name):
        x = node("Reshape", [x, const(name + ".s1", np.array([1, 2, c // 2, hw, hw], np.int64))], name + ".r1")
        x = node("Transpose", [x], name + ".t", perm=[0, 2, 1, 3, 4])
        return node("Reshape", [x, const(name + ".s2", np.array([1, c, hw, hw], np.int64))], name + ".r2")

    def branch(x, cin, c, stride, name):
        y = act(conv_b(x, cin, c, 1, 1, name + ".pw1"), "relu", name + ".pw1")
        y = conv_b(y, c, c, 3, stride, name + ".dw", groups=c)
        return act(conv_b(y, c, c, 1, 1, name + ".pw2"), "relu", name + ".pw2")

    x = act(conv_b("input", 3, 24, 3, 2, "conv1"), "relu", "conv1")
    x = node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, hw = 24, size // 4
    for si, (cout, units) in enumerate(zip((116, 232, 464), (4, 8, 4))):
        for u in range(units):
            name, half = f"stage{si + 2}.{u}", cout // 2
            if u == 0:
                hw //= 2
                a = conv_b(x, cin, cin, 3, 2, name + ".b1.dw", groups=cin)
                a = act(conv_b(a, cin, half, 1, 1, name + ".b1.pw"), "relu", name + ".b1.pw")
                b = branch(x, cin, half, 2, name + ".b2")
            else:
                split = const(name + ".split", np.array([half, half], np.int64))
                nodes.append(helper.make_node("Split", [x, split], [name + ".x1", name + ".x2"],
                                              name=name + ".chunk", axis=1))
                a, b = name + ".x1", branch(name + ".x2", half, half, 1, name + ".b2")
            x = shuffle(node("Concat", [a, b], name + ".cat", axis=1), cout, hw, name + ".shuffle")
            cin = cout
    x = act(conv_b(x, cin, 1024, 1, 1, "conv5"), "relu", "conv5")
    classifier(x, 1024, classes)
    save("shufflenetv2", path, "input", [1, 3, size, size], "output", [1, classes])


def layer_norm(x, n, name):
    axes = dict(axes=[-1])
    m = node("ReduceMean", [x], name + ".mean", **axes)
    d = node("Sub", [x, m], name + ".sub")
    p = node("Pow", [d, const(name + ".two", np.array(2.0, np.float32))], name + ".pow")
    v = node("ReduceMean", [p], name + ".var", **axes)
    s = node("Sqrt", [node("Add", [v, const(name + ".eps", np.array(1e-12, np.float32))], name + ".add_eps")], name + ".sqrt")
    y = node("Div", [d, s], name + ".div")
    y = node("Mul", [y, const(name + ".gamma", rng.uniform(0.8, 1.2, n).astype(np.float32))], name + ".mul")
    return node("Add", [y, const(name + ".beta", rng.uniform(-0.1, 0.1, n).astype(np.float32))], name + ".out")


def linear(x, cin, cout, name):
    w = const(name + ".w", (rng.standard_normal((cin, cout)) * 0.02).astype(np.float32))
    y = node("MatMul", [x, w], name)
    return node("Add", [y, const(name + ".b", rng.uniform(-0.02, 0.02, cout).astype(np.float32))], name + ".bias")


def bert_layer(path, seq=128, hidden=768, heads=12, ffn=3072):
    nodes.clear()
    inits.clear()
    dh = hidden // heads
    x = "hidden_states"
    split = const("split_shape", np.array([1, seq, heads, dh], np.int64))
    merge = const("merge_shape", np.array([1, seq, hidden], np.int64))

    def heads_of(t, name, perm):
        r = node("Reshape", [t, split], name + ".reshape")
        return node("Transpose", [r], name + ".transpose", perm=perm)

    q = heads_of(linear(x, hidden, hidden, "query"), "q", [0, 2, 1, 3])
    k = heads_of(linear(x, hidden, hidden, "key"), "k", [0, 2, 3, 1])
    v = heads_of(linear(x, hidden, hidden, "value"), "v", [0, 2, 1, 3])
    s = node("MatMul", [q, k], "scores")
    s = node("Div", [s, const("sqrt_dh", np.array(np.sqrt(dh), np.float32))], "scores.scaled")
    p = node("Softmax", [s], "probs", axis=-1)
    c = node("MatMul", [p, v], "context")
    c = node("Transpose", [c], "context.transpose", perm=[0, 2, 1, 3])
    c = node("Reshape", [c, merge], "context.merge")
    a = linear(c, hidden, hidden, "attention.output")
    a = layer_norm(node("Add", [a, x], "attention.residual"), hidden, "attention.ln")
    h = linear(a, hidden, ffn, "intermediate")
    e = node("Erf", [node("Div", [h, const("sqrt2", np.array(np.sqrt(2.0), np.float32))], "gelu.div")], "gelu.erf")
    e = node("Add", [e, const("one", np.array(1.0, np.float32))], "gelu.add")
    h = node("Mul", [node("Mul", [h, e], "gelu.mul"), const("half", np.array(0.5, np.float32))], "gelu.out")
    o = linear(h, ffn, hidden, "output")
    layer_norm(node("Add", [o, a], "output.residual"), hidden, "output.ln")
    save("bert_layer", path, x, [1, seq, hidden], "output.ln.out", [1, seq, hidden], opset=13)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    resnet18(os.path.join(out, "resnet18.onnx"))
    bert_layer(os.path.join(out, "bert_layer.onnx"))
    mobilenetv3(os.path.join(out, "mobilenetv3.onnx"))
    efficientnet_b0(os.path.join(out, "efficientnet_b0.onnx"))
    regnetx(os.path.join(out, "regnetx_400mf.onnx"), "regnetx_400mf", (32, 64, 160, 384),
            (1, 2, 7, 12), 16)
    shufflenetv2(os.path.join(out, "shufflenetv2.onnx"))
    regnetx(os.path.join(out, "regnetx_200mf.onnx"), "regnetx_200mf", (24, 56, 152, 368),
            (1, 1, 4, 7), 8)
    print(*(os.path.join(out, f) for f in
            ("resnet18.onnx", "bert_layer.onnx", "mobilenetv3.onnx", "efficientnet_b0.onnx",
             "regnetx_400mf.onnx", "shufflenetv2.onnx", "regnetx_200mf.onnx")))
