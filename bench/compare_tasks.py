#!/usr/bin/env python3
"""The tasks of a model that two lathe binaries compile differently, timed side by side.

A change to the model compiler or to the rules shows on a model as tasks that one binary has
and the other has not (another layout or block), or that the two schedule differently (their
first rule's traces differ). This lists them for each model,
builds every one with its binary's first rule (`lathe build --schedule rule:1 --emit trace`),
times them all in one `bench_built_kernel` process, and prints the sum of each side weighted by
how many kernels of the model run the task: a comparison of the changed kernels that the
host's swings between runs of whole models do not blur. Tasks both binaries share are left
out; conversions between layouts are tasks like any other, so a change that adds some is
charged for them (timed alone, with warm caches: in the model they cost more).

  python3 bench/compare_tasks.py --old OLD/lathe --new build/bin/lathe \\
      --model det.onnx:x=1x3x640x640 --model resnet18.onnx:input=1x3x224x224 [--isa avx2] [-v]
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile


def tasks(lathe, model, inputs, env):
    """{workload spec: how many kernels run it} of `model` compiled by `lathe`."""
    cmd = [lathe, "model", "tasks", "--model", model]
    for i in inputs:
        cmd += ["--input", i]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{lathe} model tasks {model}: {r.stderr.strip()}")
    counts = collections.Counter()
    for line in r.stdout.splitlines()[2:]:  # a summary line and the column header first
        f = line.split()
        if len(f) >= 3 and ":" in f[2]:
            counts[f[2]] += int(f[1])
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the lathe binary to compare against")
    ap.add_argument("--new", required=True, help="the lathe binary under test")
    ap.add_argument("--model", action="append", required=True,
                    help="FILE.onnx[:NAME=SHAPE[,NAME=SHAPE...]] (repeatable)")
    ap.add_argument("--bench", default=None,
                    help="bench_built_kernel (default: beside --new)")
    ap.add_argument("--isa", choices=["host", "avx2"], default="host",
                    help="avx2: both binaries compile and run AVX2 code (LATHE_CPU_ISA=avx2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-v", "--verbose", action="store_true", help="list the tasks and their times")
    args = ap.parse_args()
    bench = args.bench or os.path.join(os.path.dirname(args.new), "bench_built_kernel")
    env = dict(os.environ)
    if args.isa == "avx2":
        env["LATHE_CPU_ISA"] = "avx2"
    with tempfile.TemporaryDirectory() as work:
        for spec in args.model:
            model, _, shapes = spec.partition(":")
            inputs = [s for s in shapes.split(",") if s]
            old, new = tasks(args.old, model, inputs, env), tasks(args.new, model, inputs, env)
            traces = {}

            def trace(side, w):
                lathe = args.old if side == "old" else args.new
                path = os.path.join(work, f"{side}{len(traces)}.json")
                r = subprocess.run([lathe, "build", "--workload", w, "--schedule", "rule:1",
                                    "--emit", "trace", "--out", path],
                                   env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"{lathe} build {w}: {r.stderr.strip()}")
                traces[(side, w)] = path
                with open(path) as f:
                    return f.read()

            # Tasks one binary has and the other has not, and shared tasks whose first rule
            # the two schedule differently.
            sides = {"old": {w: n for w, n in old.items() if new.get(w) != n},
                     "new": {w: n for w, n in new.items() if old.get(w) != n}}
            for w, n in old.items():
                if new.get(w) == n and trace("old", w) != trace("new", w):
                    sides["old"][w] = sides["new"][w] = n
            for side in ("old", "new"):
                for w in sides[side]:
                    if (side, w) not in traces:
                        trace(side, w)
            traces = {k: v for k, v in traces.items() if k[1] in sides[k[0]]}
            us = {}
            if traces:
                cmd = [bench, "--rounds", str(args.rounds), "--seconds", "0.15"]
                for path in traces.values():
                    cmd += ["--trace", path]
                r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"{bench}: {r.stderr.strip()}")
                for line in r.stdout.splitlines():
                    m = re.match(r"\| (\S+\.json) \| [^|]*\| ([0-9.]+) ", line)
                    if m:
                        us[m.group(1)] = float(m.group(2))
            total = {side: sum(n * us.get(traces[(side, w)], float("nan"))
                               for w, n in sides[side].items()) for side in sides}
            print(f"{os.path.basename(model):34s} tasks old/new {len(sides['old']):3d} / "
                  f"{len(sides['new']):3d}   old {total['old']:9.1f} us   new "
                  f"{total['new']:9.1f} us   ({args.isa})")
            if args.verbose:
                for side in ("old", "new"):
                    for w, n in sorted(sides[side].items()):
                        print(f"  {side} x{n:<3d} {us.get(traces[(side, w)], float('nan')):8.1f} "
                              f"us  {w}")


if __name__ == "__main__":
    main()
