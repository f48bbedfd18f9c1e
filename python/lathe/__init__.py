"""lathe: the Python client of the lathe auto-tuner.

    import lathe
    client = lathe.Client("127.0.0.1:7070")             # a lathed daemon (gRPC)
    rec = client.best("matmul:m=512,n=512,k=512")        # best Record, or None
    recs = client.best_many(specs)                       # one call for many workloads
    job = client.submit({"matmul:m=512,n=512,k=512": 1.0}, trials=300)
    for p in job.follow(): ...                           # Progress until done
    lathe.Database("tuning.db").best(spec)               # a local database, no daemon
"""

from .client import Client, Job
from .database import Database
from .errors import (AmbiguousDeviceClass, BadSpec, DatabaseError, LatheError, NotFound,
                     Unauthenticated, Unreachable)
from .types import Progress, Record, TaskProgress, Worker
from .workload import canonical as canonical_workload

__all__ = [
    "AmbiguousDeviceClass", "BadSpec", "Client", "Database", "DatabaseError", "Job",
    "LatheError", "NotFound", "Progress", "Record", "TaskProgress", "Unauthenticated",
    "Unreachable", "Worker", "canonical_workload",
]
