"""Real lathed and lathe-worker processes for the Python tests (the client's and the
dashboard's browser test): binaries from the build directory (LATHED_BIN, LATHE_WORKER_BIN),
each daemon in its own directory with its database, token, spools and logs."""

import os
import re
import subprocess
import time

TOKEN = "python-client-test-token-5e2b"


def binary(var):
    path = os.environ.get(var)
    if not path or not os.path.exists(path):
        raise RuntimeError(f"{var} is not set to a built binary (run the tests through ctest)")
    return path


class Daemon:
    """A lathed process; `address` is its gRPC HOST:PORT, `url` its dashboard (with --http),
    `db` its database file."""

    def __init__(self, workdir, extra=(), token=TOKEN):
        self.dir = workdir
        self.db = os.path.join(workdir, "tuning.db")
        self.token_file = os.path.join(workdir, "token")
        argv = [binary("LATHED_BIN"), "--listen", "127.0.0.1:0", "--db", self.db,
                "--heartbeat-ms", "500", "--remeasure-top", "0", *extra]
        if token:
            with open(self.token_file, "w") as f:
                f.write(token + "\n")
            argv += ["--token-file", self.token_file]
        self.log = os.path.join(workdir, "lathed.log")
        self.procs = [subprocess.Popen(argv, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)]
        self.address = self._wait_for(r"lathed: listening on (\S+)")
        self.url = self._wait_for(r"lathed: dashboard on (\S+)") if "--http" in extra else None

    def _wait_for(self, pattern, timeout=30):
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            with open(self.log) as f:
                m = re.search(pattern, f.read())
            if m:
                return m.group(1)
            if self.procs[0].poll() is not None:
                break
            time.sleep(0.05)
        with open(self.log) as f:
            raise RuntimeError(f"lathed did not start:\n{f.read()}")

    def start_worker(self, n=0):
        """Starts lathe-worker number `n` (its own spool) on this host's CPU."""
        argv = [binary("LATHE_WORKER_BIN"), "--tuner", self.address, "--device", "cpu",
                "--spool", os.path.join(self.dir, f"spool{n}")]
        if os.path.exists(self.token_file):
            argv += ["--token-file", self.token_file]
        log = open(os.path.join(self.dir, f"worker{n}.log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
