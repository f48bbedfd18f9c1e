"""Every workload that `lathe model tasks --json` lists for the five bench models is a spec the
Python client accepts: lathe.canonical_workload gives the CLI's canonical form (and the
daemon's), and Database.best and Client.best answer without BadSpec.

PP-OCR cls/rec/det are the models of the rapidocr wheel in build/model-venv (`bash
scripts/model-venv.sh build` creates it); ResNet-18 and the BERT layer are written by
bench/make_models.py (python3-onnx and numpy). A model whose source is absent is skipped,
saying why. Both layouts the model commands take by default or by name (blocked: bpanel
matmuls, winograd kernels; nchw) are listed.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

import lathe
from lathe.v1 import service_pb2
from fleet import TOKEN, binary

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPOCR = {"cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x=1x3x48x192"),
         "rec": ("ch_PP-OCRv4_rec_infer.onnx", "x=1x3x48x320"),
         "det": ("ch_PP-OCRv4_det_infer.onnx", "x=1x3x640x640")}
MADE = {"resnet18": ("resnet18.onnx", "1x3x224x224"), "bert": ("bert_layer.onnx", "1x128x768")}


def build_dir():
    return os.path.dirname(os.path.dirname(binary("LATHE_BIN")))


@pytest.fixture(scope="module")
def made_models(tmp_path_factory):
    """resnet18.onnx and bert_layer.onnx written by bench/make_models.py, or the reason not."""
    out = str(tmp_path_factory.mktemp("models"))
    r = subprocess.run([sys.executable, os.path.join(SRC, "bench", "make_models.py"), out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"bench/make_models.py failed (python3-onnx, numpy?): {r.stderr[-300:]}"
    return out, ""


def model_file(name, made_models):
    """(path, --input) of a bench model; skips, saying why, when it is not here."""
    if name in PPOCR:
        venv = os.path.join(build_dir(), "model-venv")
        found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages",
                                       "rapidocr_onnxruntime", "models", PPOCR[name][0]))
        if not found:
            pytest.skip(f"no PP-OCR {name} model: {venv} has no rapidocr_onnxruntime wheel "
                        "(bash scripts/model-venv.sh build creates it)")
        return found[0], PPOCR[name][1]
    out, why = made_models
    if out is None:
        pytest.skip(why)
    path = os.path.join(out, MADE[name][0])
    import onnx  # make_models.py ran, so python3-onnx is here
    return path, f"{onnx.load(path).graph.input[0].name}={MADE[name][1]}"


def model_tasks(path, shape, layout):
    r = subprocess.run([binary("LATHE_BIN"), "model", "tasks", "--model", path, "--input", shape,
                        "--layout", layout, "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [t["workload"] for t in json.loads(r.stdout)["tasks"]]


@pytest.mark.parametrize("name", ["cls", "rec", "det", "resnet18", "bert"])
def test_client_and_database_accept_every_model_task(name, made_models, fleet):
    path, shape = model_file(name, made_models)
    specs = []
    for layout in ("blocked", "nchw"):
        specs += [s for s in model_tasks(path, shape, layout) if s not in specs]
    assert specs, f"no tasks for {name}"
    c = lathe.Client(fleet.address, token=TOKEN, timeout=20)
    with lathe.Database(fleet.db) as db:
        for spec in specs:
            # The CLI lists canonical specs: the client's canonical form is the same text.
            assert lathe.canonical_workload(spec) == spec
            assert db.best(spec) is None, spec
            assert c.best(spec) is None, spec
            resp = c._stub.QueryBest(service_pb2.QueryBestRequest(workload=spec),
                                     metadata=c._metadata, timeout=20)
            assert resp.workload == spec
    assert c.best_many(specs) == [None] * len(specs)
    print(f"{name}: {len(specs)} specs, ops {sorted({s.split(':')[0] for s in specs})}")


def test_bpanel_and_winograd_specs_of_a_blocked_model(made_models, fleet):
    """The specs `lathe tune --model` stores for a blocked ResNet-18: bpanel matmuls and the
    winograd kernels, which the Python copy of the spec grammar refused before the table."""
    path, shape = model_file("resnet18", made_models)
    specs = model_tasks(path, shape, "blocked")
    ops = {s.split(":")[0] for s in specs}
    assert "winograd_in" in ops and "winograd_out" in ops, ops
    assert any("bpanel=" in s for s in specs), specs
    with lathe.Database(fleet.db) as db:
        for spec in specs:
            assert db.best(spec) is None
