"""The Python client against a real lathed and lathe-worker (see conftest.py)."""

import os
import sqlite3
import subprocess
import time

import pytest

import lathe
from lathe.v1 import service_pb2
from fleet import TOKEN, Daemon

SMALL = "matmul:m=32,n=32,k=32"


def client(fleet, **kw):
    return lathe.Client(fleet.address, token=TOKEN, timeout=20, **kw)


@pytest.fixture(scope="module")
def tuned(fleet):
    """SMALL tuned for 8 trials by the fleet's worker; (client, job, progress seen)."""
    c = client(fleet)
    job = c.submit(SMALL, trials=8, batch=4, min_repeat_ms=2, seed=3)
    seen = list(job.follow())
    return c, job, seen


def test_follow_reports_progress_until_done(tuned):
    c, job, seen = tuned
    assert seen, "follow() yielded nothing"
    assert seen[-1].state == "done", seen[-1]
    assert seen[-1].final
    done = [p.trials_done for p in seen]
    assert done == sorted(done), "trials done went backwards"
    last = seen[-1]
    assert last.trials_done == 8 and last.trials_budget == 8
    assert len(last.tasks) == 1
    t = last.tasks[0]
    assert t.workload == "matmul:epilogue=none,k=32,m=32,n=32"
    assert t.weight == 1.0
    assert t.best_latency_us and t.best_latency_us > 0
    assert last.objective_us == pytest.approx(t.best_latency_us)
    assert job.status().state == "done"
    assert any(p.job_id == job.id and p.state == "done" for p in c.jobs())


def test_best_is_the_record_and_its_explanation(tuned):
    c, _, seen = tuned
    rec = c.best("matmul:k=32,n=32,m=32")  # any key order
    assert isinstance(rec, lathe.Record)
    assert rec.workload == "matmul:epilogue=none,k=32,m=32,n=32"
    assert rec.latency_us == pytest.approx(seen[-1].tasks[0].best_latency_us)
    assert rec.gflops > 0
    assert rec.device_class.startswith("cpu:")
    assert "instructions" in rec.trace
    assert "best ok record" in rec.explanation
    assert rec.measured_at is not None
    miss, why = c.best_explained("matmul:m=48,n=48,k=48")
    assert miss is None
    assert "no records" in why
    assert c.best("matmul:m=48,n=48,k=48") is None


def test_best_many_answers_in_order(tuned):
    c, _, _ = tuned
    asked = [SMALL, "matmul:m=48,n=48,k=48", "matmul:n=32,k=32,m=32"] * 400
    recs = c.best_many(asked)
    assert len(recs) == len(asked)
    for i, r in enumerate(recs):
        if i % 3 == 1:
            assert r is None
        else:
            assert r is not None and r.latency_us == recs[0].latency_us
    with pytest.raises(lathe.BadSpec, match=r"queries\[1\].*'m'"):
        c.best_many([SMALL, "matmul:m=0,n=1,k=1"])
    assert c.best_many([]) == []


def test_bad_specs_are_bad_spec_errors_naming_the_part(fleet):
    c = client(fleet)
    with pytest.raises(lathe.BadSpec, match="'m'"):
        c.submit("matmul:m=0,n=8,k=8", trials=4)
    with pytest.raises(lathe.BadSpec, match="unknown op"):
        c.best("warp:x=1")
    with pytest.raises(lathe.BadSpec, match="no workloads"):
        c.submit([], trials=4)
    with pytest.raises(lathe.BadSpec, match="trials"):
        c.submit(SMALL, trials=0)
    with pytest.raises(lathe.BadSpec, match="weight"):
        c.submit({SMALL: -1.0}, trials=4)
    # BadSpec is also a ValueError, for code that catches those.
    with pytest.raises(ValueError):
        c.submit("matmul:m=1", trials=4)


def test_weighted_tasks(fleet):
    c = client(fleet)
    tasks = {SMALL: 2.0, "matmul:m=16,n=16,k=16": 1.0}
    if "tasks" not in service_pb2.JobSpec.DESCRIPTOR.fields_by_name:
        # This protocol has no multi-task jobs yet: weights are refused, equal ones split.
        with pytest.raises(lathe.BadSpec, match="weighted tasks"):
            c.submit(tasks, trials=8)
        job = c.submit([SMALL, "matmul:m=16,n=16,k=16"], trials=6, batch=2, min_repeat_ms=2)
        p = job.status()
        assert [t.trials_target for t in p.tasks] == [3, 3]
        assert p.trials_budget == 6
    else:
        job = c.submit(tasks, trials=8, batch=2, min_repeat_ms=2)
        p = job.status()
        assert sorted(t.weight for t in p.tasks) == [1.0, 2.0]
        assert p.trials_budget == 8
    assert job.cancel().state == "cancelled"


def test_cancel_ends_the_job_and_its_follow(fleet):
    c = client(fleet)
    job = c.submit(SMALL, trials=100000, batch=2, min_repeat_ms=2)
    assert job.status().state in ("queued", "running")
    p = job.cancel()
    assert p.state == "cancelled"
    seen = list(job.follow())
    assert [s.state for s in seen] == ["cancelled"]
    with pytest.raises(lathe.NotFound):
        c.job("job-does-not-exist").cancel()


def test_workers_lists_the_fleet(fleet):
    c = client(fleet)
    until = time.monotonic() + 30
    while time.monotonic() < until:
        ws = c.workers()
        if ws:
            break
        time.sleep(0.1)
    assert len(ws) == 1
    w = ws[0]
    assert w.state in ("idle", "busy")
    assert w.device_class.startswith("cpu:")
    assert w.last_seen is not None
    assert w.host
    assert isinstance(w.lease_jobs, list)


def test_errors_name_the_cause(fleet):
    with pytest.raises(lathe.Unauthenticated, match="unauthenticated"):
        lathe.Client(fleet.address, timeout=5).workers()
    with pytest.raises(lathe.Unauthenticated):
        lathe.Client(fleet.address, token="wrong", timeout=5).best(SMALL)
    with pytest.raises(lathe.Unreachable, match="127.0.0.1:1"):
        lathe.Client("127.0.0.1:1", token=TOKEN, timeout=1)
    with pytest.raises(lathe.LatheError, match="cannot read token file"):
        lathe.Client(fleet.address, token_file="/nonexistent/token")


def test_canonical_form_matches_the_daemon(fleet):
    c = client(fleet)
    specs = [
        "matmul:n=8,m=4,k=2", "matmul:m=064,n=8,k=2,epilogue=bias_relu,dtype=float32",
        "batch_matmul:b=2,m=4,n=8,k=16", "conv2d:n=1,c=3,h=8,w=8,k=4,r=3,s=3,pad=1",
        "conv2d:n=1,c=4,h=8,w=8,k=4,r=1,s=1,groups=4,layout=nhwc,epilogue=relu",
        "pool2d:n=1,c=2,h=8,w=8,r=2,s=2,stride=2,kind=avg", "softmax:m=4,n=8",
        "layer_norm:m=4,n=8", "layer_norm:m=4,n=8,eps=0.001",
        "matmul:m=4,n=8,k=2,transpose_b=1,transpose_a=0",
        "batch_matmul:b=2,m=4,n=8,k=16,bcast=none,transpose_a=1",
        "conv2d:n=1,c=4,h=9,w=9,k=4,r=3,s=3,stride=2x2,pad=1x1x1x1,dilation=1x2",
        "conv2d:n=1,c=4,h=9,w=9,k=4,r=3,s=3,pad=0x1,epilogue=bias",
        "conv2d_transpose:n=1,c=4,h=4,w=4,k=2,r=2,s=2,stride=2",
        "pool2d:n=1,c=2,h=8,w=8,r=3,s=3,pad=1,count_include_pad=1",
        "pool2d:n=1,c=2,h=8,w=8,r=3,s=3,pad=1,kind=avg,count_include_pad=0",
        "softmax:m=4,n=8,inner=1", "softmax:m=4,n=8,inner=3",
        "ewise:a=2x3,b=2x3,binary=add", "ewise:a=002x3,epilogue=relu",
        "transpose:shape=2x3x4,perm=0x2x1", "slice:shape=4x4,begin=1x0,size=2x4",
        "concat:axis=1,inputs=1x2x4+1x3x4", "resize:n=1,c=2,h=4,w=4,oh=8,ow=8,mode=linear",
        "reduce:shape=2x3x4,axes=2,kind=sum",
        "conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nchw8c,kblock=016",
        "conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nchw8c,kblock=08",
        "conv2d:n=1,c=3,h=8,w=8,k=16,r=3,s=3,layout=nchw03c,kblock=16",
        "pool2d:n=1,c=16,h=8,w=8,r=2,s=2,layout=nchw8c",
        "resize:n=1,c=8,h=4,w=4,oh=8,ow=8,layout=nchw",
        "resize:n=1,c=8,h=4,w=4,oh=8,ow=8,mode=linear,layout=nchw04c",
        "conv2d:n=1,c=8,h=4,w=4,k=8,r=1,s=1,layout=nchw8c,epilogue=bias_hswish_scale_shift",
    ]
    for spec in specs:
        resp = c._stub.QueryBest(service_pb2.QueryBestRequest(workload=spec),
                                 metadata=c._metadata, timeout=20)
        assert lathe.canonical_workload(spec) == resp.workload, spec


def test_database_reads_the_daemons_file_read_only(fleet, tuned):
    c, _, _ = tuned
    remote = c.best(SMALL)
    with lathe.Database(fleet.db) as db:
        rec = db.best("matmul:k=32,m=32,n=32")
        assert rec is not None
        assert rec.latency_us == pytest.approx(remote.latency_us)
        assert rec.trace_json == remote.trace_json
        assert rec.device_class == remote.device_class
        assert db.best(SMALL, device_class=remote.device_class).latency_us == rec.latency_us
        assert db.best(SMALL, device_class="cpu:Other:avx2:2c") is None
        assert db.best("matmul:m=48,n=48,k=48") is None
        assert db.device_classes(SMALL) == {remote.device_class: pytest.approx(8, abs=8)}
        # Opened read-only: a write is refused by SQLite itself.
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db._conn.execute("CREATE TABLE mischief(x)")
        with pytest.raises(lathe.BadSpec):
            db.best("matmul:m=0,n=1,k=1")


def test_database_refuses_what_is_not_a_tuning_database(scratch):
    with pytest.raises(lathe.DatabaseError, match="no such file"):
        lathe.Database(os.path.join(scratch, "missing.db"))
    junk = os.path.join(scratch, "junk.db")
    with open(junk, "wb") as f:
        f.write(b"this is not sqlite" * 100)
    with pytest.raises(lathe.DatabaseError):
        lathe.Database(junk)
    other = os.path.join(scratch, "other.db")
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(lathe.DatabaseError, match="not a lathe tuning database"):
        lathe.Database(other)
    # A shared store's URL is not a file (and is not opened as one).
    with pytest.raises(lathe.DatabaseError, match="SQLite files only"):
        lathe.Database("postgresql://lathe:secret@db.example.org/lathe")


def test_tls_needs_the_ca(scratch):
    cert, key = os.path.join(scratch, "cert.pem"), os.path.join(scratch, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True)
    if r.returncode != 0:
        pytest.skip("no openssl to make a test certificate")
    d = Daemon(scratch, extra=["--tls-cert", cert, "--tls-key", key])
    try:
        with lathe.Client(d.address, token=TOKEN, tls_ca=cert, timeout=10) as c:
            assert c.workers() == []
        with pytest.raises(lathe.Unreachable):
            lathe.Client(d.address, token=TOKEN, timeout=2)
    finally:
        d.stop()
