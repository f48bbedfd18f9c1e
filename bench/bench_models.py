#!/usr/bin/env python3
"""Model benchmark: lathe against ONNX Runtime and OpenVINO in the same run, on PP-OCR
cls/rec/det (the rapidocr-onnxruntime 1.4.x models), a ResNet-18 and one BERT-base encoder
layer (bench/make_models.py); --models mobilenetv3,efficientnet_b0,regnetx_400mf,shufflenetv2,
regnetx_200mf adds models that no rule was tuned on (make_models.py, random weights). Each model is built with `lathe build --model` (untuned: default
schedules; tuned: the best records of --db) and loaded with ctypes; ONNX Runtime runs with 2
intra-op threads, OpenVINO's CPU plugin with 2 inference threads, the latency hint, one
stream and f32 precision (so that its outputs compare; on hosts with AMX or AVX512-BF16 it
would otherwise compute in bf16). The runtimes are timed alternately in one process
(--rounds rounds of --repeat calls each, after a 0.1 s pause and a warm-up call so that the
other runtimes' threads have stopped spinning), and the medians printed side by side, each
lathe build as a ratio against both (x ORT, x OpenVINO: above 1 is faster), with the max error
of lathe's and OpenVINO's outputs against ONNX Runtime's, and where lathe's time goes (the
slowest steps, `lathe run --profile`) next to where OpenVINO's goes (its PERF_COUNT profile:
the kernel it chose for each node and its time) with --profile; with --profile and --db also
the tuned whole run against the sum of its steps' records (the tuner's objective: each record
timed alone, with warm caches).

Run with the venv of scripts/model-venv.sh:
  build/model-venv/bin/python bench/bench_models.py --lathe build/bin/lathe [--db tuned.db]
      [--models cls,rec,det,resnet18,bert] [--rounds 5] [--repeat 10] [--layouts blocked,nchw]
      [--no-untuned] [--isa host|avx2]

Every (untuned/tuned) x layout variant is built and timed in the same rounds, so that the
blocked layout (nchw{b}c between convolutions) and the plain one are compared side by side.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

try:  # the speed to beat; optional, so that a venv without it still gives the ORT figures
    import openvino as ov
except ImportError:  # pragma: no cover
    ov = None

HERE = os.path.dirname(os.path.abspath(__file__))


def model_list(work):
    import importlib.util  # the package's own imports need OpenCV: only locate it
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    ocr = os.path.join(os.path.dirname(spec.origin), "models")
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_models.py"), work], check=True,
                   stdout=subprocess.DEVNULL)
    return {
        "cls": (os.path.join(ocr, "ch_ppocr_mobile_v2.0_cls_infer.onnx"), "x", [1, 3, 48, 192]),
        "rec": (os.path.join(ocr, "ch_PP-OCRv4_rec_infer.onnx"), "x", [1, 3, 48, 320]),
        "det": (os.path.join(ocr, "ch_PP-OCRv4_det_infer.onnx"), "x", [1, 3, 640, 640]),
        "resnet18": (os.path.join(work, "resnet18.onnx"), "input", [1, 3, 224, 224]),
        "bert": (os.path.join(work, "bert_layer.onnx"), "hidden_states", [1, 128, 768]),
        # Not in the default set: models no rule was tuned on, to check that the rules hold.
        "mobilenetv3": (os.path.join(work, "mobilenetv3.onnx"), "input", [1, 3, 224, 224]),
        "efficientnet_b0": (os.path.join(work, "efficientnet_b0.onnx"), "input", [1, 3, 224, 224]),
        "regnetx_400mf": (os.path.join(work, "regnetx_400mf.onnx"), "input", [1, 3, 224, 224]),
        "shufflenetv2": (os.path.join(work, "shufflenetv2.onnx"), "input", [1, 3, 224, 224]),
        "regnetx_200mf": (os.path.join(work, "regnetx_200mf.onnx"), "input", [1, 3, 224, 224]),
    }


class LatheModel:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.lathe_model_io.restype = ctypes.c_char_p
        io = json.loads(self.lib.lathe_model_io().decode())
        self.outputs = [np.zeros(o["shape"], np.float32) for o in io["outputs"]]
        self.out_ptrs = (ctypes.c_void_p * len(self.outputs))(
            *[o.ctypes.data for o in self.outputs])

    def bind(self, inputs):
        self.inputs = [np.ascontiguousarray(i, np.float32) for i in inputs]
        self.in_ptrs = (ctypes.c_void_p * len(self.inputs))(*[i.ctypes.data for i in self.inputs])

    def run(self):
        rc = self.lib.lathe_model_run(self.in_ptrs, self.out_ptrs)
        if rc != 0:
            raise RuntimeError(f"lathe_model_run returned {rc}")


OV_CONFIG = {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
             "INFERENCE_PRECISION_HINT": "f32"}


class OpenVinoModel:
    """One model compiled by OpenVINO's CPU plugin for a static input shape."""

    def __init__(self, core, path, inp, shape, x, profile=False):
        model = core.read_model(path)
        model.reshape({inp: ov.PartialShape(shape)})
        cfg = dict(OV_CONFIG)
        if profile:
            cfg["PERF_COUNT"] = True
        self.compiled = core.compile_model(model, "CPU", cfg)
        self.request = self.compiled.create_infer_request()
        self.request.set_input_tensor(ov.Tensor(x))

    def run(self):
        self.request.infer()

    def outputs(self):
        return [np.array(self.request.get_output_tensor(i).data)
                for i in range(len(self.compiled.outputs))]

    def profile(self, top):
        """The `top` slowest executed nodes of the last call: (ms, node, type, kernel)."""
        rows = [(p.real_time.total_seconds() * 1e3, p.node_name, p.node_type, p.exec_type)
                for p in self.request.profiling_info if p.status.name == "EXECUTED"]
        rows.sort(reverse=True)
        return sum(r[0] for r in rows), rows[:top]


def openvino_survives(path, inp, shape):
    """Whether OpenVINO compiles and runs the model in a child process: with its oneDNN held to
    AVX2 on an AVX-512 host, OpenVINO 2026.4 crashes (SIGSEGV) on PP-OCR rec."""
    probe = ("import sys, numpy as np, openvino as ov\n"
             "core = ov.Core(); m = core.read_model(sys.argv[1])\n"
             "shape = [int(d) for d in sys.argv[3].split('x')]; m.reshape({sys.argv[2]: shape})\n"
             "c = core.compile_model(m, 'CPU', {'INFERENCE_NUM_THREADS': 2, "
             "'INFERENCE_PRECISION_HINT': 'f32'})\n"
             "c.create_infer_request().infer({0: np.zeros(shape, np.float32)})\n")
    r = subprocess.run([sys.executable, "-c", probe, path, inp, "x".join(map(str, shape))],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode


def rel_err(outs, ref):
    return max(float(np.max(np.abs(o.reshape(r.shape) - r)) / max(np.max(np.abs(r)), 1e-30))
               for o, r in zip(outs, ref))


def timed(fn, n, settle_s=0.1):
    # The other runtime's threads may still be spinning after its last call (ONNX Runtime's
    # intra-op pool spins by default): let them go idle, and warm this one up, before timing.
    time.sleep(settle_s)
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lathe", required=True)
    ap.add_argument("--db", help="tuning database for the tuned build")
    ap.add_argument("--models", default="cls,rec,det,resnet18,bert")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--profile", action="store_true",
                    help="also show where lathe's and OpenVINO's time goes")
    ap.add_argument("--top", type=int, default=8, help="steps shown per profile")
    ap.add_argument("--layouts", default="blocked",
                    help="comma-separated --layout values to build (blocked, nchw, nchw8c, ...)")
    ap.add_argument("--no-untuned", action="store_true", help="with --db: only the tuned builds")
    ap.add_argument("--no-openvino", action="store_true", help="leave OpenVINO out")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "lathe-bench-models"))
    ap.add_argument("--isa", choices=["host", "avx2"], default="host",
                    help="avx2: lathe builds AVX2 code (LATHE_CPU_ISA=avx2) and OpenVINO's oneDNN "
                         "kernels are held to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2), so that an AVX-512 "
                         "host also gives the AVX2 figures (ONNX Runtime keeps the host's ISA)")
    a = ap.parse_args()
    if a.isa == "avx2" and os.environ.get("LATHE_CPU_ISA") != "avx2":
        # Both libraries read their caps once, at their first use: start over with them set.
        os.environ["LATHE_CPU_ISA"] = "avx2"
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    os.makedirs(a.work, exist_ok=True)
    models = model_list(a.work)
    core = None
    if ov is not None and not a.no_openvino:
        core = ov.Core()
        print(f"OpenVINO {ov.__version__}, ONNX Runtime {ort.__version__}", flush=True)
    elif not a.no_openvino:
        print("OpenVINO is not installed (scripts/model-venv.sh installs it): its column is "
              "left out", flush=True)
    print(f"ISA: lathe {os.environ.get('LATHE_CPU_ISA') or 'host'}, OpenVINO's oneDNN "
          f"{os.environ.get('ONEDNN_MAX_CPU_ISA') or 'host'}, ONNX Runtime host", flush=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    rows = []
    for name in a.models.split(","):
        path, inp, shape = models[name]
        x = np.random.default_rng(1).uniform(0, 1, size=shape).astype(np.float32)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        ref = sess.run(None, {inp: x})
        ovm = None
        if core is not None and os.environ.get("ONEDNN_MAX_CPU_ISA"):
            rc = openvino_survives(path, inp, shape)
            if rc != 0:
                print(f"{name}: OpenVINO fails with ONEDNN_MAX_CPU_ISA="
                      f"{os.environ['ONEDNN_MAX_CPU_ISA']} (exit status {rc}): no OpenVINO figure "
                      f"for it in this run", flush=True)
                core_here = None
            else:
                core_here = core
        else:
            core_here = core
        if core_here is not None:
            ovm = OpenVinoModel(core, path, inp, shape, x)
            ovm.run()
            ov_err = rel_err(ovm.outputs(), ref)
        variants = []
        for layout in a.layouts.split(","):
            sfx = "" if "," not in a.layouts else "-" + layout
            if not (a.db and a.no_untuned):
                variants.append(("untuned" + sfx, ["--schedule", "default", "--layout", layout]))
            if a.db:
                variants.append(("tuned" + sfx, ["--db", a.db, "--layout", layout]))
        libs = {}
        for vname, extra in variants:
            so = os.path.join(a.work, f"{name}.{vname}.so")
            t0 = time.time()
            subprocess.run([a.lathe, "build", "--model", path, "--input",
                            f"{inp}={'x'.join(map(str, shape))}", "--out", so] + extra,
                           check=True, stdout=subprocess.DEVNULL)
            m = LatheModel(so)
            m.bind([x])
            m.run()
            err = rel_err(m.outputs, ref)
            libs[vname] = (m, err, time.time() - t0)
        med = {k: [] for k in ["ort"] + (["ov"] if ovm else []) + list(libs)}
        for _ in range(a.rounds):  # alternate: ORT, OpenVINO, then each lathe build, every round
            med["ort"].append(timed(lambda: sess.run(None, {inp: x}), a.repeat))
            if ovm:
                med["ov"].append(timed(ovm.run, a.repeat))
            for vname, (m, _, _) in libs.items():
                med[vname].append(timed(m.run, a.repeat))
        row = {"model": name, "ort_ms": 1e3 * float(np.median(med["ort"]))}
        if ovm:
            row["openvino_ms"] = 1e3 * float(np.median(med["ov"]))
            row["openvino_max_err"] = ov_err
        for vname, (m, err, build_s) in libs.items():
            row[vname + "_ms"] = 1e3 * float(np.median(med[vname]))
            row[vname + "_speedup"] = row["ort_ms"] / row[vname + "_ms"]
            if ovm:
                row[vname + "_vs_openvino"] = row["openvino_ms"] / row[vname + "_ms"]
            row[vname + "_max_err"] = err
            row[vname + "_build_s"] = build_s
        rows.append(row)
        line = f"{name:9s} ORT {row['ort_ms']:8.2f} ms"
        if ovm:
            line += f"   OpenVINO {row['openvino_ms']:8.2f} ms (err {ov_err:.1e})"
        for vname in libs:
            line += (f"\n    lathe {vname:16s} {row[vname + '_ms']:8.2f} ms "
                     f"({row[vname + '_speedup']:.2f}x ORT")
            if ovm:
                line += f", {row[vname + '_vs_openvino']:.2f}x OpenVINO"
            line += f", err {row[vname + '_max_err']:.1e})"
        print(line, flush=True)
        if a.profile:
            cmd = [a.lathe, "run", "--model", path, "--input", f"{inp}={'x'.join(map(str, shape))}",
                   "--repeat", "5", "--profile", "--json", "--layout", a.layouts.split(",")[0]]
            cmd += ["--db", a.db] if a.db else ["--default-schedules"]
            prof = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            rec_ms = prof.get("records_ms", 0.0)
            if a.db and rec_ms > 0:
                # The tuner's objective against what the model takes: the records timed alone
                # (warm caches) beside the whole run's median of the alternated rounds.
                whole = row[("tuned" if "," not in a.layouts else "tuned-" + a.layouts.split(",")[0])
                            + "_ms"]
                row["records_ms"] = rec_ms
                row["whole_vs_records"] = whole / rec_ms
                missing = prof.get("steps_without_record", 0)
                print(f"    whole run {whole:.2f} ms against its records' sum {rec_ms:.2f} ms: "
                      f"{whole / rec_ms:.2f}x"
                      + (f" ({missing} steps without a record)" if missing else ""))
            print(f"    lathe: steps add up to {sum(p['ms'] for p in prof['profile']):.2f} ms; "
                  f"the slowest:")
            for p in prof["profile"][:a.top]:
                print(f"    {100 * p['share']:5.1f}% {p['ms']:7.3f} ms  {p['workload']}  [{p['origin']}]")
            if ovm:
                pm = OpenVinoModel(core, path, inp, shape, x, profile=True)
                for _ in range(3):
                    pm.run()
                total, top = pm.profile(a.top)
                print(f"    OpenVINO: nodes add up to {total:.2f} ms; the slowest:")
                for ms, node, typ, kernel in top:
                    print(f"    {100 * ms / total:5.1f}% {ms:7.3f} ms  {typ} {node}  [{kernel}]")
    print(f"load average after: {os.getloadavg()}")
    print_table(rows)
    print(json.dumps(rows))


def print_table(rows):
    """The figures a user wants, one row per model and build: milliseconds, and speed as a
    ratio against ONNX Runtime and OpenVINO (above 1: lathe is faster)."""
    print("\n| model | build | lathe ms | ORT ms | x ORT | OpenVINO ms | x OpenVINO | max err vs ORT |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        ov_ms = row.get("openvino_ms")
        for key in row:
            if not key.endswith("_speedup"):
                continue
            v = key[: -len("_speedup")]
            ov = (f"{ov_ms:.2f} | {row[v + '_vs_openvino']:.2f}" if ov_ms is not None
                  else "- | -")
            print(f"| {row['model']} | {v} | {row[v + '_ms']:.2f} | {row['ort_ms']:.2f} | "
                  f"{row[key]:.2f} | {ov} | {row[v + '_max_err']:.1e} |")


if __name__ == "__main__":
    sys.exit(main())
