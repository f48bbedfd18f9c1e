#!/usr/bin/env python3
"""How fast the dashboard page draws in a real browser (chromium, headless, 1440x900) for a
small fleet (2 workers, 1 job: the baseline) and for a large one (500 simulated workers and 20
running jobs; target: under 1 s to render). The workers are registered over gRPC and keep
heartbeating (they lease nothing), the jobs are real ones with tasks waiting in the queue.
Prints, per fleet: the time from navigation to the first complete drawing, and the page's own
figures (window.latheStats: the slowest and the last redraw, the last /api/state fetch).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_dashboard_page.py [--build build]
"""

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import grpc

from lathe.v1 import service_pb2, service_pb2_grpc

TOKEN = "bench-page-token"


def start_lathed(build, workdir):
    with open(os.path.join(workdir, "token"), "w") as f:
        f.write(TOKEN)
    log = os.path.join(workdir, "lathed.log")
    p = subprocess.Popen([os.path.join(build, "bin", "lathed"), "--listen", "127.0.0.1:0",
                          "--db", os.path.join(workdir, "t.db"), "--http", "127.0.0.1:0",
                          "--token-file", os.path.join(workdir, "token"),
                          "--search-threads", "1"],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        text = open(log).read()
        m, u = re.search(r"listening on (\S+)", text), re.search(r"dashboard on (\S+)", text)
        if m and u:
            return p, m.group(1), u.group(1)
        time.sleep(0.05)
    raise RuntimeError("lathed did not start:\n" + open(log).read())


def populate(address, workers, jobs, stop):
    md = (("authorization", "Bearer " + TOKEN),)
    ch = grpc.insecure_channel(address)
    ws = service_pb2_grpc.WorkerServiceStub(ch)
    tuner = service_pb2_grpc.TunerStub(ch)
    ids = []
    for i in range(workers):
        r = ws.Register(service_pb2.RegisterRequest(
            hostname=f"gpu-node-{i // 8:03d}", lathe_version="bench",
            devices=[service_pb2.DeviceInfo(device_class="cpu:AMD EPYC:avx512:2c", kind="cpu")]),
            metadata=md, timeout=10)
        ids.append(r.worker_id)
    for j in range(jobs):
        tuner.SubmitJob(service_pb2.SubmitJobRequest(spec=service_pb2.JobSpec(
            workloads=[f"matmul:m={32 + 8 * j},n=64,k=64"], device_class="cpu:AMD EPYC:avx512:2c",
            trials=1000, batch=16, min_repeat_ms=1)), metadata=md, timeout=10)

    def beat():  # keeps the simulated workers alive (not lost) while the page is measured
        while not stop.is_set():
            for w in ids:
                ws.Heartbeat(service_pb2.HeartbeatRequest(worker_id=w), metadata=md, timeout=10)
            stop.wait(2.0)
    t = threading.Thread(target=beat, daemon=True)
    t.start()
    return t


def measure(url, workers, seconds):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    o = webdriver.ChromeOptions()
    o.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1440,900"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=o)
    try:
        d.get(url + "/login")
        d.find_element(By.ID, "token").send_keys(TOKEN)
        t0 = time.monotonic()
        d.find_element(By.ID, "login").click()
        while d.execute_script(
                "return document.querySelectorAll('#workers tbody tr[data-worker]').length") < workers:
            time.sleep(0.01)
        first = time.monotonic() - t0
        time.sleep(seconds)
        s = d.execute_script("return window.latheStats")
        return first, s
    finally:
        d.quit()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=8)
    args = ap.parse_args()
    print("dashboard page in headless chromium, 1440x900; target: under 1 s to render")
    for workers, jobs in ((2, 1), (500, 20)):
        workdir = tempfile.mkdtemp(prefix="lathe_bench_page_")
        stop = threading.Event()
        p, address, url = start_lathed(args.build, workdir)
        try:
            populate(address, workers, jobs, stop)
            first, s = measure(url, workers, args.seconds)
            ok = "ok" if first < 1 and s["maxRenderMs"] < 1000 else "MISSED"
            print(f"  {workers:4d} workers, {jobs:2d} jobs: login to the first full drawing "
                  f"{first * 1000:7.0f} ms; redraws {s['renders']}, slowest {s['maxRenderMs']:6.1f} ms, "
                  f"last {s['lastRenderMs']:6.1f} ms; last /api/state fetch {s['lastFetchMs']:6.1f} ms"
                  + ("" if workers < 100 else f"   {ok}"))
        finally:
            stop.set()
            p.terminate()
            p.wait()
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
