// Records: insertion (idempotent by candidate id), best / top-k queries, measured traces,
// iteration and statistics.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "db/database.h"
#include "db/database_impl.h"
#include "db/record.h"

namespace lathe::db {

// ---------------------------------------------------------------------------- record.h

std::string_view ErrorClassName(ErrorClass error_class) {
  switch (error_class) {
    case ErrorClass::kOk:
      return "ok";
    case ErrorClass::kInvalidSchedule:
      return "invalid_schedule";
    case ErrorClass::kCompileError:
      return "compile_error";
    case ErrorClass::kRuntimeError:
      return "runtime_error";
    case ErrorClass::kTimeout:
      return "timeout";
    case ErrorClass::kWrongAnswer:
      return "wrong_answer";
  }
  return "unknown";
}

absl::StatusOr<ErrorClass> ParseErrorClass(std::string_view name) {
  for (ErrorClass c : kAllErrorClasses) {
    if (ErrorClassName(c) == name) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown error class '", std::string(name), "'"));
}

double Record::Gflops() const {
  if (!(flops > 0) || !(median_us > 0)) return 0;
  return flops / (median_us * 1e3);
}

double Median(std::span<const double> values) {
  if (values.empty()) return 0;
  std::vector<double> v(values.begin(), values.end());
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  double upper = v[mid];
  double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

double CoefficientOfVariation(std::span<const double> values) {
  if (values.size() < 2) return 0;
  double mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  if (mean == 0) return 0;
  double ss = 0;
  for (double x : values) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / (values.size() - 1)) / mean;
}

// ---------------------------------------------------------------------------- helpers

namespace internal {

std::string EncodeRepeats(const std::vector<double>& repeats) {
  std::string out(repeats.size() * 8, '\0');
  for (size_t i = 0; i < repeats.size(); ++i) {
    uint64_t bits;
    std::memcpy(&bits, &repeats[i], 8);
    for (int b = 0; b < 8; ++b) out[i * 8 + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  return out;
}

std::vector<double> DecodeRepeats(const std::string& blob) {
  std::vector<double> out(blob.size() / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t bits = 0;
    for (int b = 0; b < 8; ++b) {
      bits |= static_cast<uint64_t>(static_cast<unsigned char>(blob[i * 8 + b])) << (8 * b);
    }
    std::memcpy(&out[i], &bits, 8);
  }
  return out;
}

absl::StatusOr<std::optional<int64_t>> FindWorkloadId(Connection& conn, const std::string& key) {
  absl::StatusOr<Statement> stmt = conn.Prepare("SELECT id FROM workloads WHERE key = ?");
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, key);
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<int64_t>();
  return std::optional<int64_t>(stmt->ColumnInt64(0));
}

absl::StatusOr<std::optional<int64_t>> FindDeviceClassId(Connection& conn,
                                                         const std::string& name) {
  absl::StatusOr<Statement> stmt = conn.Prepare("SELECT id FROM device_classes WHERE name = ?");
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, name);
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<int64_t>();
  return std::optional<int64_t>(stmt->ColumnInt64(0));
}

absl::StatusOr<std::optional<int64_t>> InsertReturningId(Statement& insert) {
  absl::StatusOr<bool> row = insert.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<int64_t>();
  int64_t id = insert.ColumnInt64(0);
  if (absl::Status st = insert.Run(); !st.ok()) return st;
  return std::optional<int64_t>(id);
}

absl::StatusOr<int64_t> WorkloadId(Connection& conn, const std::string& key,
                                   const std::string& spec) {
  // Twice at most: a key that another writer inserts between the lookup and the insert is
  // found by the second lookup.
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      absl::StatusOr<Statement> stmt = conn.Prepare("SELECT id, spec FROM workloads WHERE key = ?");
      if (!stmt.ok()) return stmt.status();
      stmt->BindText(1, key);
      absl::StatusOr<bool> row = stmt->Step();
      if (!row.ok()) return row.status();
      if (*row) {
        std::string stored = stmt->ColumnText(1);
        if (stored != spec) {
          return absl::InvalidArgumentError(
              absl::StrCat("workload key ", absl::CHexEscape(key), " is already used by spec '",
                           absl::CHexEscape(stored), "', not '", absl::CHexEscape(spec), "'"));
        }
        return stmt->ColumnInt64(0);
      }
    }
    absl::StatusOr<Statement> insert = conn.Prepare(
        "INSERT INTO workloads(key, spec) VALUES(?, ?) ON CONFLICT(key) DO NOTHING RETURNING id");
    if (!insert.ok()) return insert.status();
    insert->BindText(1, key).BindText(2, spec);
    absl::StatusOr<std::optional<int64_t>> id = InsertReturningId(*insert);
    if (!id.ok()) return id.status();
    if (id->has_value()) return **id;
  }
  return absl::AbortedError(absl::StrCat("workload key ", absl::CHexEscape(key),
                                         ": inserted and not found (concurrent writers)"));
}

absl::StatusOr<int64_t> DeviceClassId(Connection& conn, const std::string& name) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::optional<int64_t>> found = FindDeviceClassId(conn, name);
    if (!found.ok()) return found.status();
    if (found->has_value()) return **found;
    absl::StatusOr<Statement> insert = conn.Prepare(
        "INSERT INTO device_classes(name) VALUES(?) ON CONFLICT(name) DO NOTHING RETURNING id");
    if (!insert.ok()) return insert.status();
    insert->BindText(1, name);
    absl::StatusOr<std::optional<int64_t>> id = InsertReturningId(*insert);
    if (!id.ok()) return id.status();
    if (id->has_value()) return **id;
  }
  return absl::AbortedError(absl::StrCat("device class ", absl::CHexEscape(name),
                                         ": inserted and not found (concurrent writers)"));
}

}  // namespace internal

namespace {

using internal::Connection;
using internal::Statement;

constexpr char kSelectRecord[] =
    "SELECT r.id, r.candidate_id, w.spec, w.key, d.name, r.trace_json, r.repeats, r.median_us, "
    "r.cv, r.flops, r.error_class, r.error_msg, r.worker, r.lathe_version, r.measured_at, "
    "r.inserted_at, r.remeasured_at FROM records r JOIN workloads w ON w.id = r.workload_id "
    "JOIN device_classes d ON d.id = r.device_class_id ";

absl::StatusOr<Record> ReadRecord(const Statement& stmt) {
  Record r;
  r.id = stmt.ColumnInt64(0);
  r.candidate_id = stmt.ColumnText(1);
  r.workload = stmt.ColumnText(2);
  r.workload_key = stmt.ColumnText(3);
  r.device_class = stmt.ColumnText(4);
  r.trace_json = stmt.ColumnText(5);
  r.repeats_us = internal::DecodeRepeats(stmt.ColumnBlob(6));
  r.median_us = stmt.ColumnDouble(7);
  r.cv = stmt.ColumnDouble(8);
  r.flops = stmt.ColumnDouble(9);
  absl::StatusOr<ErrorClass> ec = ParseErrorClass(stmt.ColumnText(10));
  if (!ec.ok()) {
    return absl::DataLossError(absl::StrCat("record ", r.id, ": ", ec.status().message()));
  }
  r.error_class = *ec;
  r.error_msg = stmt.ColumnText(11);
  r.worker = stmt.ColumnText(12);
  r.lathe_version = stmt.ColumnText(13);
  r.measured_at_ms = stmt.ColumnInt64(14);
  r.inserted_at_ms = stmt.ColumnInt64(15);
  r.remeasured_at_ms = stmt.ColumnInt64(16);
  return r;
}

// Reads every row of a prepared record query.
absl::StatusOr<std::vector<Record>> ReadRecords(Statement& stmt) {
  std::vector<Record> out;
  while (true) {
    absl::StatusOr<bool> row = stmt.Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    absl::StatusOr<Record> r = ReadRecord(stmt);
    if (!r.ok()) return r.status();
    out.push_back(*std::move(r));
  }
}

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// A deterministic candidate id from the record's identifying content, so that re-importing
// a record that had none does not duplicate it.
std::string AutoCandidateId(const Record& r) {
  std::string blob;
  for (const std::string* s : {&r.workload_key, &r.device_class, &r.trace_json, &r.worker}) {
    absl::StrAppend(&blob, s->size(), ":", *s, ";");
  }
  absl::StrAppend(&blob, r.measured_at_ms, ";", internal::EncodeRepeats(r.repeats_us));
  uint64_t a = Fnv1a(0xcbf29ce484222325ULL, blob);
  uint64_t b = Fnv1a(0x84222325cbf29ce4ULL, blob);
  return absl::StrFormat("auto:%016x%016x", a, b);
}

bool Finite(double x) { return std::isfinite(x); }

// Validates `in` and fills derived fields.
absl::StatusOr<Record> Prepared(const Record& in) {
  Record r = in;
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("record ", absl::CHexEscape(r.candidate_id), ": ", std::string(what)));
  };
  if (r.workload_key.empty()) return bad("empty workload key");
  if (r.workload.empty()) return bad("empty workload spec");
  if (r.device_class.empty()) return bad("empty device class");
  for (double x : r.repeats_us) {
    if (!Finite(x) || x < 0) return bad(absl::StrCat("repeat time ", x, " is not a duration"));
  }
  if (r.median_us == 0 && !r.repeats_us.empty()) {
    r.median_us = Median(r.repeats_us);
    r.cv = CoefficientOfVariation(r.repeats_us);
  }
  if (!Finite(r.median_us) || r.median_us < 0) {
    return bad(absl::StrCat("median ", r.median_us, " us is not a duration"));
  }
  if (!Finite(r.cv) || r.cv < 0) return bad(absl::StrCat("coefficient of variation ", r.cv));
  if (!Finite(r.flops) || r.flops < 0) return bad(absl::StrCat("flops ", r.flops));
  if (r.remeasured_at_ms < 0) return bad(absl::StrCat("remeasured_at ", r.remeasured_at_ms));
  if (r.error_class == ErrorClass::kOk && !(r.median_us > 0)) {
    return bad("ok record without a positive median");
  }
  if (r.candidate_id.empty()) r.candidate_id = AutoCandidateId(r);
  return r;
}

// Inserts one validated record; must run inside a write transaction.
absl::StatusOr<InsertResult> InsertOne(Connection& conn, const Record& r, int64_t now) {
  auto find = [&]() -> absl::StatusOr<std::optional<int64_t>> {
    absl::StatusOr<Statement> stmt = conn.Prepare("SELECT id FROM records WHERE candidate_id = ?");
    if (!stmt.ok()) return stmt.status();
    stmt->BindText(1, r.candidate_id);
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) return std::optional<int64_t>();
    return std::optional<int64_t>(stmt->ColumnInt64(0));
  };
  absl::StatusOr<std::optional<int64_t>> existing = find();
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return InsertResult{**existing, false};
  absl::StatusOr<int64_t> wid = internal::WorkloadId(conn, r.workload_key, r.workload);
  if (!wid.ok()) return wid.status();
  absl::StatusOr<int64_t> did = internal::DeviceClassId(conn, r.device_class);
  if (!did.ok()) return did.status();
  absl::StatusOr<Statement> insert = conn.Prepare(
      "INSERT INTO records(candidate_id, workload_id, device_class_id, trace_json, repeats, "
      "median_us, cv, flops, error_class, error_msg, worker, lathe_version, measured_at, "
      "inserted_at, remeasured_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT(candidate_id) DO NOTHING RETURNING id");
  if (!insert.ok()) return insert.status();
  insert->BindText(1, r.candidate_id)
      .BindInt64(2, *wid)
      .BindInt64(3, *did)
      .BindText(4, r.trace_json)
      .BindBlob(5, internal::EncodeRepeats(r.repeats_us))
      .BindDouble(6, r.median_us)
      .BindDouble(7, r.cv)
      .BindDouble(8, r.flops)
      .BindText(9, ErrorClassName(r.error_class))
      .BindText(10, r.error_msg)
      .BindText(11, r.worker)
      .BindText(12, r.lathe_version)
      .BindInt64(13, r.measured_at_ms)
      .BindInt64(14, now)
      .BindInt64(15, r.remeasured_at_ms);
  absl::StatusOr<std::optional<int64_t>> id = internal::InsertReturningId(*insert);
  if (!id.ok()) return id.status();
  if (id->has_value()) return InsertResult{**id, true};
  // Another writer of a shared store committed the same candidate meanwhile.
  existing = find();
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return InsertResult{**existing, false};
  return absl::AbortedError(absl::StrCat("record ", absl::CHexEscape(r.candidate_id),
                                         ": inserted and not found (concurrent writers)"));
}

// Writes `batches` in one transaction, each all or nothing under a savepoint of its own, and
// sets each batch's result: its rows once the commit succeeded, its own error, or the error
// that ended the transaction. Expects the connection's mutex held.
void CommitGroup(Connection& conn, const std::vector<internal::PendingBatch*>& batches) {
  auto fail_all = [&](const absl::Status& st) {
    for (internal::PendingBatch* b : batches) b->result = st;
  };
  absl::StatusOr<internal::Transaction> txn = internal::Transaction::BeginImmediate(conn);
  if (!txn.ok()) return fail_all(txn.status());
  const int64_t now = internal::NowMs();
  std::vector<std::vector<InsertResult>> rows(batches.size());
  std::vector<absl::Status> own(batches.size());  // a batch's own error (rolled back alone)
  for (size_t i = 0; i < batches.size(); ++i) {
    if (absl::Status st = conn.Exec("SAVEPOINT batch", "savepoint"); !st.ok()) return fail_all(st);
    for (const Record& r : *batches[i]->records) {
      absl::StatusOr<InsertResult> res = InsertOne(conn, r, now);
      if (!res.ok()) {
        own[i] = res.status();
        break;
      }
      rows[i].push_back(*res);
    }
    const char* end = own[i].ok() ? "RELEASE batch" : "ROLLBACK TO batch; RELEASE batch";
    if (absl::Status st = conn.Exec(end, "end savepoint"); !st.ok()) {
      return fail_all(own[i].ok() ? st : own[i]);
    }
  }
  if (absl::Status st = txn->Commit(); !st.ok()) return fail_all(st);
  for (size_t i = 0; i < batches.size(); ++i) {
    if (own[i].ok()) {
      batches[i]->result = std::move(rows[i]);
    } else {
      batches[i]->result = own[i];
    }
  }
}

// The stored ids of a workload and a device class; nullopt when either is not stored (then no
// record can match both).
absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> FindWorkloadAndClass(
    Connection& conn, const std::string& workload_key, const std::string& device_class) {
  absl::StatusOr<std::optional<int64_t>> wid = internal::FindWorkloadId(conn, workload_key);
  if (!wid.ok()) return wid.status();
  absl::StatusOr<std::optional<int64_t>> did = internal::FindDeviceClassId(conn, device_class);
  if (!did.ok()) return did.status();
  if (!wid->has_value() || !did->has_value()) return std::nullopt;
  return std::make_pair(**wid, **did);
}

}  // namespace

absl::StatusOr<InsertResult> Database::Insert(const Record& record) {
  absl::StatusOr<std::vector<InsertResult>> out = InsertBatch(std::span<const Record>(&record, 1));
  if (!out.ok()) return out.status();
  return out->front();
}

absl::StatusOr<std::vector<InsertResult>> Database::InsertBatch(std::span<const Record> records) {
  std::vector<Record> prepared;
  prepared.reserve(records.size());
  for (const Record& r : records) {
    absl::StatusOr<Record> p = Prepared(r);
    if (!p.ok()) return p.status();
    prepared.push_back(*std::move(p));
  }
  internal::PendingBatch mine;
  mine.records = &prepared;
  Impl& s = *impl_;
  std::unique_lock<std::mutex> group_lock(s.group_mu);
  s.group.push_back(&mine);
  s.group_cv.wait(group_lock, [&] { return mine.done || !s.committing; });
  if (mine.done) return std::move(mine.result);
  // The leader: commits every batch queued so far (its own among them) in one transaction;
  // batches queued meanwhile wait for the next leader.
  s.committing = true;
  std::vector<internal::PendingBatch*> batches;
  batches.swap(s.group);
  group_lock.unlock();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CommitGroup(*s.conn, batches);
  }
  group_lock.lock();
  for (internal::PendingBatch* b : batches) b->done = true;
  s.committing = false;
  s.group_cv.notify_all();
  return std::move(mine.result);
}

absl::StatusOr<Record> Database::AddRepeats(const std::string& candidate_id,
                                            std::span<const double> repeats_us,
                                            int64_t measured_at_ms) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "re-measurement of ", absl::CHexEscape(candidate_id), ": ", std::string(what)));
  };
  if (repeats_us.empty()) return bad("no repeats");
  for (double x : repeats_us) {
    if (!Finite(x) || !(x > 0)) return bad(absl::StrCat("repeat time ", x, " is not a duration"));
  }
  if (measured_at_ms < 0) return bad(absl::StrCat("measured_at ", measured_at_ms));
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<internal::Transaction> txn = internal::Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  absl::StatusOr<Statement> find = conn.Prepare(
      absl::StrCat(kSelectRecord, "WHERE r.candidate_id = ?", conn.LockRecordClause()));
  if (!find.ok()) return find.status();
  find->BindText(1, candidate_id);
  absl::StatusOr<std::vector<Record>> rows = ReadRecords(*find);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) {
    return absl::NotFoundError(absl::StrCat("no record ", absl::CHexEscape(candidate_id)));
  }
  Record r = std::move(rows->front());
  if (r.error_class != ErrorClass::kOk) {
    return absl::FailedPreconditionError(
        absl::StrCat("record ", absl::CHexEscape(candidate_id), " is ",
                     std::string(ErrorClassName(r.error_class)),
                     ", not ok: only a timed record can be re-measured"));
  }
  r.repeats_us.insert(r.repeats_us.end(), repeats_us.begin(), repeats_us.end());
  r.median_us = Median(r.repeats_us);
  r.cv = CoefficientOfVariation(r.repeats_us);
  r.remeasured_at_ms = measured_at_ms;
  absl::StatusOr<Statement> update = conn.Prepare(
      "UPDATE records SET repeats = ?, median_us = ?, cv = ?, remeasured_at = ? WHERE id = ?");
  if (!update.ok()) return update.status();
  update->BindBlob(1, internal::EncodeRepeats(r.repeats_us))
      .BindDouble(2, r.median_us)
      .BindDouble(3, r.cv)
      .BindInt64(4, r.remeasured_at_ms)
      .BindInt64(5, r.id);
  if (absl::Status st = update->Run(); !st.ok()) return st;
  if (absl::Status st = txn->Commit(); !st.ok()) return st;
  return r;
}

absl::StatusOr<std::vector<Record>> Database::TopK(const std::string& workload_key,
                                                   const std::string& device_class, int k) {
  if (k <= 0) return std::vector<Record>();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> ids =
      FindWorkloadAndClass(conn, workload_key, device_class);
  if (!ids.ok()) return ids.status();
  if (!ids->has_value()) return std::vector<Record>();
  absl::StatusOr<Statement> stmt = conn.Prepare(
      absl::StrCat(kSelectRecord,
                   "WHERE r.workload_id = ? AND r.device_class_id = ? AND r.error_class = 'ok' "
                   "ORDER BY r.median_us, r.id LIMIT ?"));
  if (!stmt.ok()) return stmt.status();
  stmt->BindInt64(1, (*ids)->first).BindInt64(2, (*ids)->second).BindInt64(3, k);
  return ReadRecords(*stmt);
}

absl::StatusOr<std::vector<Record>> Database::TopOfRelatedWorkloads(const std::string& op,
                                                                    const std::string& device_class,
                                                                    const std::string& exclude_key,
                                                                    int per_workload, int k) {
  if (k <= 0 || per_workload <= 0 || op.empty()) return std::vector<Record>();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<std::optional<int64_t>> did = internal::FindDeviceClassId(conn, device_class);
  if (!did.ok()) return did.status();
  if (!did->has_value()) return std::vector<Record>();
  const std::string prefix = op + ":";
  absl::StatusOr<Statement> stmt = conn.Prepare(absl::StrCat(
      "WITH ranked AS (SELECT r2.id AS id, ROW_NUMBER() OVER (PARTITION BY r2.workload_id "
      "ORDER BY r2.median_us, r2.id) AS rn FROM records r2 JOIN workloads w2 ON w2.id = "
      "r2.workload_id WHERE r2.device_class_id = ? AND r2.error_class = 'ok' AND w2.key != ? "
      "AND substr(w2.spec, 1, CAST(? AS INTEGER)) = ?) ",
      kSelectRecord,
      "JOIN ranked k ON k.id = r.id WHERE k.rn <= ? ORDER BY k.rn, r.workload_id LIMIT ?"));
  if (!stmt.ok()) return stmt.status();
  stmt->BindInt64(1, **did)
      .BindText(2, exclude_key)
      .BindInt64(3, static_cast<int64_t>(prefix.size()))
      .BindText(4, prefix)
      .BindInt64(5, per_workload)
      .BindInt64(6, k);
  return ReadRecords(*stmt);
}

absl::StatusOr<std::optional<Record>> Database::Best(const std::string& workload_key,
                                                     const std::string& device_class) {
  absl::StatusOr<std::vector<Record>> top = TopK(workload_key, device_class, 1);
  if (!top.ok()) return top.status();
  if (top->empty()) return std::optional<Record>();
  return std::optional<Record>(std::move(top->front()));
}

absl::StatusOr<std::vector<std::string>> Database::MeasuredTraces(const std::string& workload_key,
                                                                  const std::string& device_class) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<std::optional<int64_t>> wid = internal::FindWorkloadId(conn, workload_key);
  if (!wid.ok()) return wid.status();
  if (!wid->has_value()) return std::vector<std::string>();
  absl::StatusOr<Statement> stmt = [&]() -> absl::StatusOr<Statement> {
    if (device_class.empty()) {
      absl::StatusOr<Statement> s =
          conn.Prepare("SELECT trace_json FROM records WHERE workload_id = ?");
      if (s.ok()) s->BindInt64(1, **wid);
      return s;
    }
    absl::StatusOr<std::optional<int64_t>> did = internal::FindDeviceClassId(conn, device_class);
    if (!did.ok()) return did.status();
    // An unknown device class matches nothing: id 0 is never assigned.
    absl::StatusOr<Statement> s = conn.Prepare(
        "SELECT trace_json FROM records WHERE workload_id = ? AND device_class_id = ?");
    if (s.ok()) s->BindInt64(1, **wid).BindInt64(2, did->value_or(0));
    return s;
  }();
  if (!stmt.ok()) return stmt.status();
  std::set<std::string> traces;
  while (true) {
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    traces.insert(stmt->ColumnText(0));
  }
  return std::vector<std::string>(traces.begin(), traces.end());
}

absl::StatusOr<std::vector<TimelinePoint>> Database::Timeline(const std::string& workload_key,
                                                              const std::string& device_class) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> ids =
      FindWorkloadAndClass(conn, workload_key, device_class);
  if (!ids.ok()) return ids.status();
  std::vector<TimelinePoint> points;
  if (!ids->has_value()) return points;
  absl::StatusOr<Statement> stmt = conn.Prepare(
      "SELECT measured_at, median_us, error_class, flops FROM records "
      "WHERE workload_id = ? AND device_class_id = ? ORDER BY measured_at, id");
  if (!stmt.ok()) return stmt.status();
  stmt->BindInt64(1, (*ids)->first).BindInt64(2, (*ids)->second);
  while (true) {
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    TimelinePoint p;
    p.measured_at_ms = stmt->ColumnInt64(0);
    p.median_us = stmt->ColumnDouble(1);
    absl::StatusOr<ErrorClass> ec = ParseErrorClass(stmt->ColumnText(2));
    if (!ec.ok()) return ec.status();
    p.error_class = *ec;
    p.flops = stmt->ColumnDouble(3);
    points.push_back(p);
  }
  return points;
}

absl::StatusOr<std::optional<Record>> Database::GetByCandidateId(const std::string& candidate_id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  absl::StatusOr<Statement> stmt =
      impl_->conn->Prepare(absl::StrCat(kSelectRecord, "WHERE r.candidate_id = ?"));
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, candidate_id);
  absl::StatusOr<std::vector<Record>> rows = ReadRecords(*stmt);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<Record>();
  return std::optional<Record>(std::move(rows->front()));
}

absl::StatusOr<std::vector<bool>> Database::HasCandidates(
    std::span<const std::string> candidate_ids) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<bool> out;
  out.reserve(candidate_ids.size());
  for (const std::string& id : candidate_ids) {
    absl::StatusOr<Statement> stmt =
        impl_->conn->Prepare("SELECT 1 FROM records WHERE candidate_id = ?");
    if (!stmt.ok()) return stmt.status();
    stmt->BindText(1, id);
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    out.push_back(*row);
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> Database::WorkloadSpecForKey(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  absl::StatusOr<Statement> stmt = impl_->conn->Prepare("SELECT spec FROM workloads WHERE key = ?");
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, key);
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<std::string>();
  return std::optional<std::string>(stmt->ColumnText(0));
}

absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> Database::DeviceClassesWithOkRecords(
    const std::string& workload_key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  std::vector<std::pair<std::string, int64_t>> out;
  absl::StatusOr<std::optional<int64_t>> wid = internal::FindWorkloadId(conn, workload_key);
  if (!wid.ok()) return wid.status();
  if (!wid->has_value()) return out;
  absl::StatusOr<Statement> stmt = conn.Prepare(
      "SELECT d.name, count(*) FROM records r JOIN device_classes d ON d.id = r.device_class_id "
      "WHERE r.workload_id = ? AND r.error_class = 'ok' GROUP BY d.id, d.name ORDER BY d.name");
  if (!stmt.ok()) return stmt.status();
  stmt->BindInt64(1, **wid);
  while (true) {
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    out.emplace_back(stmt->ColumnText(0), stmt->ColumnInt64(1));
  }
}

absl::Status Database::ForEachRecord(const std::function<absl::Status(const Record&)>& fn) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  // In pages by id, so that a server store never hands over every record at once.
  constexpr int64_t kPage = 1024;
  int64_t after = 0;
  while (true) {
    std::vector<Record> page;
    {
      absl::StatusOr<Statement> stmt =
          impl_->conn->Prepare(absl::StrCat(kSelectRecord, "WHERE r.id > ? ORDER BY r.id LIMIT ?"));
      if (!stmt.ok()) return stmt.status();
      stmt->BindInt64(1, after).BindInt64(2, kPage);
      absl::StatusOr<std::vector<Record>> rows = ReadRecords(*stmt);
      if (!rows.ok()) return rows.status();
      page = *std::move(rows);
    }
    for (const Record& r : page) {
      if (absl::Status st = fn(r); !st.ok()) return st;
    }
    if (static_cast<int64_t>(page.size()) < kPage) return absl::OkStatus();
    after = page.back().id;
  }
}

absl::StatusOr<Stats> Database::GetStats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  Stats s;
  // One read transaction, so the counts are consistent with each other.
  if (absl::Status st = conn.BeginRead(); !st.ok()) return st;
  auto fill = [&]() -> absl::Status {
    absl::StatusOr<int64_t> v = conn.QueryInt64("SELECT count(*) FROM workloads");
    if (!v.ok()) return v.status();
    s.workloads = *v;
    v = conn.QueryInt64("SELECT count(*) FROM device_classes");
    if (!v.ok()) return v.status();
    s.device_classes = *v;
    v = conn.SchemaVersion();
    if (!v.ok()) return v.status();
    s.schema_version = *v;
    absl::StatusOr<Statement> stmt =
        conn.Prepare("SELECT error_class, count(*) FROM records GROUP BY error_class");
    if (!stmt.ok()) return stmt.status();
    while (true) {
      absl::StatusOr<bool> row = stmt->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      int64_t n = stmt->ColumnInt64(1);
      s.by_error_class[stmt->ColumnText(0)] = n;
      s.records += n;
    }
    s.ok_records = s.by_error_class.count("ok") ? s.by_error_class["ok"] : 0;
    return absl::OkStatus();
  };
  absl::Status st = fill();
  absl::Status end = conn.Exec("COMMIT", "end read transaction");
  if (!st.ok()) return st;
  if (!end.ok()) return end;
  return s;
}

}  // namespace lathe::db
