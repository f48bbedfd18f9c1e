"""Plain data the client returns: best records, job progress, workers.

Built from the lathe.v1 protobuf messages (or database rows); fields keep the protocol's
names. Multi-task fields (a task's weight, a job's budget and objective) are read when this
build's protocol has them and derived from the tasks otherwise.
"""

import dataclasses
import datetime
import json
from typing import Dict, List, Optional

_STATES = {0: "unspecified", 1: "queued", 2: "running", 3: "done", 4: "failed", 5: "cancelled"}
FINAL_STATES = ("done", "failed", "cancelled")


def _time(ms):
    """Unix milliseconds as an aware UTC datetime; None for 0."""
    if not ms:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000.0, tz=datetime.timezone.utc)


def _field(msg, name, default=None):
    """A field of `msg` when its message type has it (see the module comment), else default."""
    if name in msg.DESCRIPTOR.fields_by_name:
        return getattr(msg, name)
    return default


@dataclasses.dataclass(frozen=True)
class Record:
    """The best record of a workload on a device class, and why it was chosen."""
    workload: str            # canonical spec
    device_class: str
    latency_us: float        # median
    gflops: float
    trace_json: str          # the schedule trace (JSON text)
    measured_at: Optional[datetime.datetime]
    worker: str
    explanation: str         # which record was used and why

    @property
    def trace(self):
        """The schedule trace as a dict."""
        return json.loads(self.trace_json)

    @classmethod
    def from_proto(cls, r):
        """A Record for a QueryBestResponse, or None when nothing was found."""
        if not r.found:
            return None
        return cls(workload=r.workload, device_class=r.device_class, latency_us=r.latency_us,
                   gflops=r.gflops, trace_json=r.trace_json, measured_at=_time(r.measured_at_ms),
                   worker=r.worker, explanation=r.explanation)


@dataclasses.dataclass(frozen=True)
class TaskProgress:
    workload: str
    weight: float
    trials_done: int
    trials_target: int
    best_latency_us: Optional[float]
    best_gflops: Optional[float]
    errors: Dict[str, int]
    remeasured: int
    remeasure_failed: int
    remeasure_pending: int

    @classmethod
    def from_proto(cls, p):
        weight = _field(p, "weight", 1.0) or 1.0
        return cls(workload=p.workload, weight=weight, trials_done=p.trials_done,
                   trials_target=p.trials_target,
                   best_latency_us=p.best_latency_us if p.best_latency_us > 0 else None,
                   best_gflops=p.best_gflops if p.best_gflops > 0 else None,
                   errors=dict(p.errors), remeasured=p.remeasured,
                   remeasure_failed=p.remeasure_failed, remeasure_pending=p.remeasure_pending)


@dataclasses.dataclass(frozen=True)
class Progress:
    """A job's status: one item of Job.follow()."""
    job_id: str
    state: str               # queued, running, done, failed, cancelled
    device_class: str
    tasks: List[TaskProgress]
    trials_done: int
    trials_budget: int
    objective_us: Optional[float]   # sum of weight x best latency, once every task has one
    message: str             # why it failed, when it did
    created_at: Optional[datetime.datetime]
    updated_at: Optional[datetime.datetime]

    @property
    def final(self):
        return self.state in FINAL_STATES

    @classmethod
    def from_proto(cls, st):
        tasks = [TaskProgress.from_proto(p) for p in st.workloads]
        done = _field(st, "trials_done") or sum(t.trials_done for t in tasks)
        budget = _field(st, "trials_budget") or sum(t.trials_target for t in tasks)
        objective = _field(st, "objective_us") or None
        if objective is None and tasks and all(t.best_latency_us for t in tasks):
            objective = sum(t.weight * t.best_latency_us for t in tasks)
        return cls(job_id=st.job_id, state=_STATES.get(st.state, "unknown"),
                   device_class=st.device_class, tasks=tasks, trials_done=done,
                   trials_budget=budget, objective_us=objective, message=st.message,
                   created_at=_time(st.created_at_ms), updated_at=_time(st.updated_at_ms))


@dataclasses.dataclass(frozen=True)
class Worker:
    id: str
    host: str
    device_class: str
    state: str               # idle, busy, lost
    measured: int            # results reported
    last_seen: Optional[datetime.datetime]
    leased_tasks: int
    lease_deadline: Optional[datetime.datetime]
    lease_jobs: List[str]
    version: str

    @classmethod
    def from_proto(cls, w):
        return cls(id=w.worker_id, host=w.hostname, device_class=w.device_class, state=w.state,
                   measured=w.measured, last_seen=_time(w.last_seen_ms),
                   leased_tasks=w.leased_tasks, lease_deadline=_time(w.lease_deadline_ms),
                   lease_jobs=list(w.lease_job_ids), version=w.lathe_version)
