"""A local tuning database read directly (no daemon): the best record of a workload.

The SQLite file (db/schema.cc) is opened read-only (SQLite's mode=ro: this code cannot write
to it, so it cannot damage it, even while lathed or `lathe tune` writes to it: WAL lets
readers run beside the writer). Best = the lowest median among ok records of the workload on
the device class, ties to the earliest inserted, as lathe itself chooses.
"""

import os
import re
import sqlite3
import urllib.parse

from . import errors
from . import workload as wl
from .types import Record, _time

# The newest schema version this code reads (db/database.h kSchemaVersion).
SCHEMA_VERSION = 4


class Database:
    """A tuning database file, read-only. Use as a context manager or call close()."""

    def __init__(self, path, busy_timeout_s=30.0):
        self.path = os.fspath(path)
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", self.path):
            # A URL is never a file path; a PostgreSQL store is read through lathed.
            raise errors.DatabaseError(
                f"database {self.path.split('://')[0]}://...: lathe.Database reads SQLite files "
                "only; query a shared store through lathed (lathe.Client)")
        if not os.path.isfile(self.path):
            raise errors.DatabaseError(f"database {self.path}: no such file")
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
        try:
            self._conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s,
                                         check_same_thread=False)
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise errors.DatabaseError(f"database {self.path}: {e}") from None
        if version > SCHEMA_VERSION:
            self._conn.close()
            raise errors.DatabaseError(
                f"database {self.path}: schema version {version} is newer than this client "
                f"reads ({SCHEMA_VERSION})")
        if not {"workloads", "device_classes", "records"} <= tables:
            self._conn.close()
            raise errors.DatabaseError(f"database {self.path}: not a lathe tuning database")

    def close(self):
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _query(self, sql, args):
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as e:
            raise errors.DatabaseError(f"database {self.path}: {e}") from None

    def device_classes(self, workload):
        """{device class: ok records} of a workload."""
        key = wl.key(wl.canonical(workload))
        rows = self._query(
            "SELECT d.name, COUNT(*) FROM records r JOIN workloads w ON w.id = r.workload_id "
            "JOIN device_classes d ON d.id = r.device_class_id "
            "WHERE w.key = ? AND r.error_class = 'ok' GROUP BY d.name ORDER BY d.name", (key,))
        return dict(rows)

    def _match_stored(self, canon):
        """(stored spec, "") of the op's one stored spec with the same keys and
        values as `canon` (for specs this client cannot put in canonical form: see
        workload.py), else (None, why nothing matched)."""
        op, params = wl.parse(canon)
        key = wl.key(canon)
        miss = f"no records for workload {canon} (key {key}) on any device class"
        rows = self._query("SELECT spec FROM workloads WHERE substr(spec, 1, ?) = ?",
                           (len(op) + 1, op + ":"))
        same, near = [], []
        for (spec,) in rows:
            try:
                sop, sparams = wl.parse(spec)
                sparams = wl.canonical_params(sop, sparams)
            except errors.BadSpec:
                continue
            if sparams == params:
                same.append(spec)
            elif all(sparams.get(k) == v for k, v in params.items()):
                near.append(spec)
        if len(same) == 1:
            return same[0], ""
        if near:
            miss += ("; stored specs of this op that hold every key given: " + "; ".join(near[:5])
                     + " (write the spec in full, as `lathe query` prints it)")
        return None, miss

    def best(self, workload, device_class=None):
        """The best Record of `workload` on `device_class`, or None. Without a device class,
        the only one holding ok records of the workload is used; AmbiguousDeviceClass names
        them when there are several (records of different classes never mix)."""
        rec, _ = self.best_explained(workload, device_class)
        return rec

    def best_explained(self, workload, device_class=None):
        """(Record or None, explanation)."""
        canon = wl.canonical(workload)
        key = wl.key(canon)
        stored = self._query("SELECT spec FROM workloads WHERE key = ?", (key,))
        if not stored:
            found, why = self._match_stored(canon)
            if found is None:
                return None, why
            canon, key = found, wl.key(found)
            stored = [(found,)]
        if stored[0][0] != canon:
            return None, (f"workload key {key} belongs to '{stored[0][0]}' in the database, "
                          f"not {canon}; its records are not used")
        how = ""
        if device_class is None:
            classes = self.device_classes(canon)
            if not classes:
                return None, f"no ok record for {canon} on any device class"
            if len(classes) > 1:
                raise errors.AmbiguousDeviceClass(
                    f"{canon} has ok records on {len(classes)} device classes: "
                    + "; ".join(f"{c} ({n})" for c, n in classes.items())
                    + ": name one (device_class=...)")
            device_class = next(iter(classes))
            how = " (the only device class with ok records)"
        rows = self._query(
            "SELECT r.candidate_id, r.median_us, r.flops, r.trace_json, r.measured_at, r.worker "
            "FROM records r JOIN workloads w ON w.id = r.workload_id "
            "JOIN device_classes d ON d.id = r.device_class_id "
            "WHERE w.key = ? AND d.name = ? AND r.error_class = 'ok' "
            "ORDER BY r.median_us, r.id LIMIT 1", (key, device_class))
        if not rows:
            return None, f"no ok record for {canon} on {device_class}"
        cid, median, flops, trace, measured_at, worker = rows[0]
        explanation = (f"best ok record for {canon} on {device_class}{how}: record {cid} "
                       f"(median {median:.3f} us, measured by {worker or 'unknown worker'})")
        gflops = flops / (median * 1e3) if flops > 0 and median > 0 else 0.0
        return Record(workload=canon, device_class=device_class, latency_us=median,
                      gflops=gflops, trace_json=trace, measured_at=_time(measured_at),
                      worker=worker, explanation=explanation), explanation
