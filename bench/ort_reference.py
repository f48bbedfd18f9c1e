#!/usr/bin/env python3
"""ONNX Runtime as lathe's reference for models (2 intra-op threads), driven by the model
tests and benchmarks. Run with the venv that scripts/model-venv.sh makes.

  ort_reference.py run MODEL --input NAME=SHAPE ... [--feed NAME=FILE ...] [--dump DIR]
                       [--repeat N] [--threads 2]
      runs the model (deterministic random inputs unless --feed gives raw float32 files),
      writes output i as DIR/i.bin (raw float32) and prints {"latency_ms": median, ...}.
  ort_reference.py inputs MODEL --input NAME=SHAPE ... --out DIR [--seed S]
      writes deterministic random inputs as DIR/NAME.bin and prints --feed arguments.
  ort_reference.py compare REF_DIR GOT_DIR [--tol 1e-3]
      compares every REF_DIR/i.bin with GOT_DIR/i.bin: max |got - ref| / max |ref|; exit 1
      when an output is above the tolerance, has NaN/Inf, or differs in size.
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def parse_shapes(items):
    shapes = {}
    for item in items or []:
        name, _, shape = item.rpartition("=")
        shapes[name] = [int(d) for d in shape.split("x")]
    return shapes


def session(model, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def make_inputs(sess, shapes, feeds, seed):
    rng = np.random.default_rng(seed)
    data = {}
    for inp in sess.get_inputs():
        shape = shapes.get(inp.name) or [d if isinstance(d, int) else 1 for d in inp.shape]
        if inp.name in feeds:
            data[inp.name] = np.fromfile(feeds[inp.name], dtype="<f4").reshape(shape)
        else:
            data[inp.name] = rng.uniform(-1, 1, size=shape).astype(np.float32)
    return data


def cmd_run(a):
    sess = session(a.model, a.threads)
    feeds = dict(f.split("=", 1) for f in a.feed or [])
    data = make_inputs(sess, parse_shapes(a.input), feeds, a.seed)
    outs = sess.run(None, data)
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        sess.run(None, data)
        times.append(time.perf_counter() - t0)
    if a.dump:
        os.makedirs(a.dump, exist_ok=True)
        for i, o in enumerate(outs):
            np.asarray(o, dtype="<f4").tofile(os.path.join(a.dump, f"{i}.bin"))
    times.sort()
    print(json.dumps({"latency_ms": 1e3 * times[len(times) // 2], "repeat": a.repeat,
                      "outputs": [{"name": o.name, "shape": list(r.shape)}
                                  for o, r in zip(sess.get_outputs(), outs)]}))


def cmd_inputs(a):
    sess = session(a.model, 1)
    data = make_inputs(sess, parse_shapes(a.input), {}, a.seed)
    os.makedirs(a.out, exist_ok=True)
    args = []
    for name, arr in data.items():
        path = os.path.join(a.out, name.replace("/", "_") + ".bin")
        arr.astype("<f4").tofile(path)
        args.append(f"{name}={path}")
    print(" ".join(args))


def cmd_compare(a):
    worst = 0.0
    i = 0
    ok = True
    while os.path.exists(os.path.join(a.ref, f"{i}.bin")):
        ref = np.fromfile(os.path.join(a.ref, f"{i}.bin"), dtype="<f4").astype(np.float64)
        path = os.path.join(a.got, f"{i}.bin")
        if not os.path.exists(path):
            print(f"output {i}: missing {path}")
            return 1
        got = np.fromfile(path, dtype="<f4").astype(np.float64)
        if got.size != ref.size:
            print(f"output {i}: {got.size} elements, reference {ref.size}")
            return 1
        if not np.all(np.isfinite(got)):
            print(f"output {i}: NaN or Inf")
            return 1
        scale = max(np.max(np.abs(ref)), 1e-30)
        err = float(np.max(np.abs(got - ref)) / scale)
        print(f"output {i}: {ref.size} elements, max |ref| {scale:.4g}, "
              f"max error / max |ref| = {err:.3g}")
        worst = max(worst, err)
        ok = ok and err <= a.tol
        i += 1
    if i == 0:
        print(f"no outputs in {a.ref}")
        return 1
    print(f"worst {worst:.3g} (tolerance {a.tol})")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("model")
    r.add_argument("--input", action="append")
    r.add_argument("--feed", action="append")
    r.add_argument("--dump")
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--seed", type=int, default=1)
    i = sub.add_parser("inputs")
    i.add_argument("model")
    i.add_argument("--input", action="append")
    i.add_argument("--out", required=True)
    i.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("ref")
    c.add_argument("got")
    c.add_argument("--tol", type=float, default=1e-3)
    a = p.parse_args()
    if a.cmd == "run":
        cmd_run(a)
        return 0
    if a.cmd == "inputs":
        cmd_inputs(a)
        return 0
    return cmd_compare(a)


if __name__ == "__main__":
    sys.exit(main())
