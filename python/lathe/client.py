"""The client of lathed's Tuner service (proto/lathe/v1/service.proto) over gRPC.

    client = lathe.Client("tuner:7070", token=open("token").read().strip())
    rec = client.best("matmul:m=512,n=512,k=512")          # a Record, or None
    job = client.submit({"conv2d:...": 2.0, "matmul:...": 1.0}, trials=600)
    for p in job.follow(): print(p.trials_done, "/", p.trials_budget)

Every unary call carries a deadline (`timeout`) and, with a token, the metadata
"authorization: Bearer TOKEN". Errors are lathe.errors exceptions naming the cause.
A Client may be used from several threads.
"""

import math
import time

import grpc

from . import errors
from .types import Progress, Record, Worker
from .v1 import service_pb2, service_pb2_grpc

# The daemon answers at most this many queries per QueryBestMany call.
MAX_QUERIES_PER_CALL = 10000


def _read_file(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.LatheError(f"cannot read {what} {path}: {e.strerror}") from None


def _normalise_tasks(workloads):
    """[(spec, weight)] from a spec, a list of specs, a {spec: weight} dict or (spec, weight)
    pairs; BadSpec naming what is wrong."""
    if isinstance(workloads, str):
        workloads = [workloads]
    if isinstance(workloads, dict):
        items = list(workloads.items())
    else:
        items = []
        for w in workloads:
            if isinstance(w, str):
                items.append((w, 1.0))
            elif isinstance(w, (tuple, list)) and len(w) == 2 and isinstance(w[0], str):
                items.append((w[0], w[1]))
            else:
                raise errors.BadSpec(f"a task is a workload spec or (spec, weight), got {w!r}")
    if not items:
        raise errors.BadSpec("no workloads to tune")
    out = []
    for spec, weight in items:
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise errors.BadSpec(f"weight of {spec} is not a number: {weight!r}") from None
        if not math.isfinite(weight) or weight <= 0:
            raise errors.BadSpec(f"weight of {spec} must be a positive number, got {weight}")
        out.append((spec, weight))
    return out


class Job:
    """A job on the daemon: follow its progress, wait for it, cancel it."""

    def __init__(self, client, job_id):
        self._client = client
        self.id = job_id

    def __repr__(self):
        return f"Job({self.id!r} on {self._client.address})"

    def status(self):
        """The job's current Progress."""
        for p in self.follow():
            return p
        raise errors.LatheError(f"lathed at {self._client.address} sent no status for {self.id}")

    def follow(self, reconnect_s=60.0):
        """An iterator of Progress: the current status at once, then one per change, until the
        job is done, failed or cancelled. When the daemon goes away (a restart), the stream is
        opened again for up to `reconnect_s` seconds before Unreachable is raised."""
        c = self._client
        give_up = None
        backoff = 0.1
        while True:
            stream = c._stub.WatchJob(service_pb2.WatchJobRequest(job_id=self.id),
                                      metadata=c._metadata)
            try:
                for st in stream:
                    give_up, backoff = None, 0.1
                    p = Progress.from_proto(st)
                    yield p
                    if p.final:
                        return
                return  # the daemon ended the stream: the job is final
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise errors.from_rpc_error(e, c.address, f"watch job {self.id}") from None
                now = time.monotonic()
                give_up = give_up or now + reconnect_s
                if now >= give_up:
                    raise errors.from_rpc_error(e, c.address, f"watch job {self.id}") from None
                time.sleep(backoff)
                backoff = min(2.0, backoff * 2)
            finally:
                stream.cancel()

    def wait(self):
        """Follows the job to its end; returns its last Progress."""
        last = None
        for p in self.follow():
            last = p
        return last

    def cancel(self):
        """Cancels the job (its results so far are kept); returns its Progress after that."""
        c = self._client
        resp = c._call("cancel job", c._stub.CancelJob,
                       service_pb2.CancelJobRequest(job_id=self.id))
        return Progress.from_proto(resp.status)


class Client:
    """A connection to lathed. `address` is HOST:PORT; `token` the shared secret (or
    `token_file`, the file holding it); `tls_ca` the PEM file of the CA that signed the daemon's
    certificate (TLS; without it, plaintext). Connects at once: Unreachable when no daemon
    answers within `timeout` seconds."""

    def __init__(self, address, token=None, tls_ca=None, timeout=10.0, token_file=None):
        if not address:
            raise errors.LatheError("no daemon address (HOST:PORT)")
        self.address = address
        self.timeout = timeout
        if token is None and token_file is not None:
            token = _read_file(token_file, "token file").decode().strip()
            if not token:
                raise errors.LatheError(f"token file {token_file} is empty")
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        options = [("grpc.max_receive_message_length", 256 << 20),
                   ("grpc.max_send_message_length", 64 << 20)]
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=_read_file(tls_ca, "TLS CA"))
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = service_pb2_grpc.TunerStub(self._channel)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise errors.Unreachable(
                f"lathed at {address} is unreachable: no connection within {timeout:g} s"
                + (" (is it serving TLS with a certificate signed by this CA?)" if tls_ca else "")
            ) from None

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, what, method, request, timeout=None):
        try:
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self.address, what) from None

    # --- records ---

    def best(self, workload, device_class=None):
        """The best Record of `workload` on `device_class` (default: the daemon's, i.e. its
        workers' CPU class), or None when there is none (best_explained() says why)."""
        rec, _ = self.best_explained(workload, device_class)
        return rec

    def best_explained(self, workload, device_class=None):
        """(Record or None, explanation): why that record, or why none."""
        resp = self._call("query best", self._stub.QueryBest,
                          service_pb2.QueryBestRequest(workload=workload,
                                                       device_class=device_class or ""))
        return Record.from_proto(resp), resp.explanation

    def best_many(self, workloads, device_class=None):
        """The best Record (or None) of each workload, in order, in as few calls as the daemon
        allows (one per MAX_QUERIES_PER_CALL). BadSpec names the first malformed workload."""
        workloads = list(workloads)
        out = []
        for start in range(0, len(workloads), MAX_QUERIES_PER_CALL):
            chunk = workloads[start:start + MAX_QUERIES_PER_CALL]
            req = service_pb2.QueryBestManyRequest(queries=[
                service_pb2.QueryBestRequest(workload=w, device_class=device_class or "")
                for w in chunk])
            try:
                resp = self._call("query best (many)", self._stub.QueryBestMany, req,
                                  timeout=max(self.timeout, 60.0))
            except errors.BadSpec as e:
                if start:  # the daemon counts from the start of this call
                    e.args = (f"{e.args[0]} (query index offset {start})",)
                raise
            if len(resp.results) != len(chunk):
                raise errors.LatheError(f"lathed at {self.address} answered {len(resp.results)} "
                                        f"of {len(chunk)} queries")
            out.extend(Record.from_proto(r) for r in resp.results)
        return out

    # --- jobs ---

    def submit(self, workloads, trials=300, *, target="cpu", device_class=None, batch=None,
               seed=None, min_repeat_ms=None, remeasure_top=None):
        """Submits a tuning job; returns its Job.

        `workloads` is a spec, a list of specs, a {spec: weight} dict or (spec, weight) pairs;
        several make one multi-task job whose `trials` is the total budget, spread over the
        tasks by the daemon's task scheduler as their weights say."""
        tasks = _normalise_tasks(workloads)
        if not isinstance(trials, int) or trials <= 0:
            raise errors.BadSpec(f"trials must be a positive integer, got {trials!r}")
        spec = service_pb2.JobSpec(target=target, device_class=device_class or "")
        if "tasks" in service_pb2.JobSpec.DESCRIPTOR.fields_by_name:
            for w, weight in tasks:
                spec.tasks.add(workload=w, weight=weight)
            spec.trials = trials
        else:
            # This build's protocol has per-workload trials only (no multi-task jobs): the
            # budget is split evenly, and weights other than 1 cannot be honoured.
            if any(weight != 1.0 for _, weight in tasks):
                raise errors.BadSpec("weighted tasks need a lathed with multi-task jobs "
                                     "(JobSpec.tasks); this protocol has none")
            spec.workloads.extend(w for w, _ in tasks)
            spec.trials = max(1, -(-trials // len(tasks)))
        if batch is not None:
            spec.batch = batch
        if seed is not None:
            spec.seed = seed
        if min_repeat_ms is not None:
            spec.min_repeat_ms = min_repeat_ms
        if remeasure_top is not None:
            spec.remeasure_top = remeasure_top
        resp = self._call("submit job", self._stub.SubmitJob,
                          service_pb2.SubmitJobRequest(spec=spec))
        return Job(self, resp.job_id)

    def job(self, job_id):
        """The Job with this id (NotFound is raised by its first call if it does not exist)."""
        return Job(self, job_id)

    def jobs(self):
        """Progress of every job the daemon knows, oldest first."""
        resp = self._call("list jobs", self._stub.ListJobs, service_pb2.ListJobsRequest())
        return [Progress.from_proto(j) for j in resp.jobs]

    def workers(self):
        """Every registered Worker (lost ones included)."""
        resp = self._call("list workers", self._stub.ListWorkers,
                          service_pb2.ListWorkersRequest())
        return [Worker.from_proto(w) for w in resp.workers]
