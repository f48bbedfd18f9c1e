// Cost-model blobs per device class and tuning jobs.

#include "absl/strings/str_cat.h"
#include "db/database.h"
#include "db/database_impl.h"

namespace lathe::db {
namespace {

using internal::Connection;
using internal::Statement;

constexpr JobState kAllJobStates[] = {JobState::kQueued, JobState::kRunning, JobState::kDone,
                                      JobState::kFailed, JobState::kCancelled};

constexpr char kSelectJob[] =
    "SELECT uid, spec_json, device_class, state, trials_requested, trials_done, error_msg, "
    "created_at, updated_at FROM jobs ";

absl::StatusOr<Job> ReadJob(const Statement& stmt) {
  Job j;
  j.uid = stmt.ColumnText(0);
  j.spec_json = stmt.ColumnText(1);
  j.device_class = stmt.ColumnText(2);
  absl::StatusOr<JobState> state = ParseJobState(stmt.ColumnText(3));
  if (!state.ok()) {
    return absl::DataLossError(absl::StrCat("job ", j.uid, ": ", state.status().message()));
  }
  j.state = *state;
  j.trials_requested = stmt.ColumnInt64(4);
  j.trials_done = stmt.ColumnInt64(5);
  j.error_msg = stmt.ColumnText(6);
  j.created_at_ms = stmt.ColumnInt64(7);
  j.updated_at_ms = stmt.ColumnInt64(8);
  return j;
}

}  // namespace

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<JobState> ParseJobState(std::string_view name) {
  for (JobState s : kAllJobStates) {
    if (JobStateName(s) == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown job state '", std::string(name), "'"));
}

absl::Status Database::PutFeatures(std::span<const StoredFeatures> features) {
  for (const StoredFeatures& f : features) {
    if (f.candidate_id.empty()) return absl::InvalidArgumentError("features: empty candidate id");
    if (f.num_rows < 0 || f.num_cols <= 0 ||
        static_cast<int64_t>(f.data.size()) != f.num_rows * f.num_cols * 4) {
      return absl::InvalidArgumentError(absl::StrCat("features of ", f.candidate_id, ": ",
                                                     f.data.size(), " bytes for ", f.num_rows,
                                                     " x ", f.num_cols, " floats"));
    }
  }
  if (features.empty()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<internal::Transaction> txn = internal::Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  for (const StoredFeatures& f : features) {
    absl::StatusOr<Statement> stmt = conn.Prepare(
        "INSERT INTO features(candidate_id, version, num_rows, num_cols, data) "
        "VALUES(?, ?, ?, ?, ?) ON CONFLICT(candidate_id) DO UPDATE SET version = "
        "excluded.version, num_rows = excluded.num_rows, num_cols = excluded.num_cols, "
        "data = excluded.data");
    if (!stmt.ok()) return stmt.status();
    stmt->BindText(1, f.candidate_id)
        .BindInt64(2, f.version)
        .BindInt64(3, f.num_rows)
        .BindInt64(4, f.num_cols)
        .BindBlob(5, f.data);
    if (absl::Status st = stmt->Run(); !st.ok()) return st;
  }
  return txn->Commit();
}

absl::StatusOr<std::vector<std::optional<StoredFeatures>>> Database::GetFeatures(
    std::span<const std::string> candidate_ids) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::optional<StoredFeatures>> out;
  out.reserve(candidate_ids.size());
  for (const std::string& id : candidate_ids) {
    absl::StatusOr<Statement> stmt = impl_->conn->Prepare(
        "SELECT version, num_rows, num_cols, data FROM features WHERE candidate_id = ?");
    if (!stmt.ok()) return stmt.status();
    stmt->BindText(1, id);
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) {
      out.emplace_back();
      continue;
    }
    StoredFeatures f;
    f.candidate_id = id;
    f.version = stmt->ColumnInt64(0);
    f.num_rows = stmt->ColumnInt64(1);
    f.num_cols = stmt->ColumnInt64(2);
    f.data = stmt->ColumnBlob(3);
    if (static_cast<int64_t>(f.data.size()) != f.num_rows * f.num_cols * 4) {
      out.emplace_back();  // damaged: as if missing (the caller lowers the trace again)
      continue;
    }
    out.emplace_back(std::move(f));
  }
  return out;
}

absl::Status Database::PutCostModel(const CostModelBlob& blob) {
  if (blob.device_class.empty()) {
    return absl::InvalidArgumentError("cost model: empty device class");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<internal::Transaction> txn = internal::Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  absl::StatusOr<int64_t> did = internal::DeviceClassId(conn, blob.device_class);
  if (!did.ok()) return did.status();
  absl::StatusOr<Statement> stmt = conn.Prepare(
      "INSERT INTO cost_models(device_class_id, format, model, trained_on, updated_at) "
      "VALUES(?, ?, ?, ?, ?) ON CONFLICT(device_class_id) DO UPDATE SET format = excluded.format, "
      "model = excluded.model, trained_on = excluded.trained_on, updated_at = excluded.updated_at");
  if (!stmt.ok()) return stmt.status();
  stmt->BindInt64(1, *did)
      .BindText(2, blob.format)
      .BindBlob(3, blob.model)
      .BindInt64(4, blob.trained_on)
      .BindInt64(5, internal::NowMs());
  if (absl::Status st = stmt->Run(); !st.ok()) return st;
  return txn->Commit();
}

absl::StatusOr<std::optional<CostModelBlob>> Database::GetCostModel(
    const std::string& device_class) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  absl::StatusOr<Statement> stmt = impl_->conn->Prepare(
      "SELECT m.format, m.model, m.trained_on, m.updated_at FROM cost_models m "
      "JOIN device_classes d ON d.id = m.device_class_id WHERE d.name = ?");
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, device_class);
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<CostModelBlob>();
  CostModelBlob blob;
  blob.device_class = device_class;
  blob.format = stmt->ColumnText(0);
  blob.model = stmt->ColumnBlob(1);
  blob.trained_on = stmt->ColumnInt64(2);
  blob.updated_at_ms = stmt->ColumnInt64(3);
  return std::optional<CostModelBlob>(std::move(blob));
}

absl::Status Database::CreateJob(const Job& job) {
  if (job.uid.empty()) return absl::InvalidArgumentError("job: empty uid");
  std::lock_guard<std::mutex> lock(impl_->mu);
  Connection& conn = *impl_->conn;
  absl::StatusOr<internal::Transaction> txn = internal::Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  absl::StatusOr<Statement> stmt = conn.Prepare(
      "INSERT INTO jobs(uid, spec_json, device_class, state, trials_requested, trials_done, "
      "error_msg, created_at, updated_at) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT(uid) DO NOTHING RETURNING id");
  if (!stmt.ok()) return stmt.status();
  int64_t now = internal::NowMs();
  stmt->BindText(1, job.uid)
      .BindText(2, job.spec_json)
      .BindText(3, job.device_class)
      .BindText(4, JobStateName(job.state))
      .BindInt64(5, job.trials_requested)
      .BindInt64(6, job.trials_done)
      .BindText(7, job.error_msg)
      .BindInt64(8, now)
      .BindInt64(9, now);
  absl::StatusOr<std::optional<int64_t>> id = internal::InsertReturningId(*stmt);
  if (!id.ok()) return id.status();
  if (!id->has_value()) {
    return absl::AlreadyExistsError(absl::StrCat("job ", job.uid, ": already exists"));
  }
  return txn->Commit();
}

namespace {

// Sets a job's state, trials and error (and its spec_json, when given) in one transaction.
absl::Status UpdateJobRow(Connection& conn, const std::string& uid, JobState state,
                          int64_t trials_done, const std::string& error_msg,
                          const std::string* spec_json) {
  absl::StatusOr<internal::Transaction> txn = internal::Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  absl::StatusOr<Statement> stmt = conn.Prepare(
      spec_json ? "UPDATE jobs SET state = ?, trials_done = ?, error_msg = ?, updated_at = ?, "
                  "spec_json = ? WHERE uid = ? RETURNING id"
                : "UPDATE jobs SET state = ?, trials_done = ?, error_msg = ?, updated_at = ? "
                  "WHERE uid = ? RETURNING id");
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, JobStateName(state))
      .BindInt64(2, trials_done)
      .BindText(3, error_msg)
      .BindInt64(4, internal::NowMs());
  if (spec_json) {
    stmt->BindText(5, *spec_json).BindText(6, uid);
  } else {
    stmt->BindText(5, uid);
  }
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("job ", uid, ": no such job"));
  if (absl::Status st = stmt->Run(); !st.ok()) return st;
  return txn->Commit();
}

}  // namespace

absl::Status Database::UpdateJob(const std::string& uid, JobState state, int64_t trials_done,
                                 const std::string& error_msg) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return UpdateJobRow(*impl_->conn, uid, state, trials_done, error_msg, nullptr);
}

absl::Status Database::UpdateJobAndSpec(const std::string& uid, JobState state, int64_t trials_done,
                                        const std::string& error_msg,
                                        const std::string& spec_json) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return UpdateJobRow(*impl_->conn, uid, state, trials_done, error_msg, &spec_json);
}

absl::StatusOr<std::optional<Job>> Database::GetJob(const std::string& uid) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  absl::StatusOr<Statement> stmt = impl_->conn->Prepare(absl::StrCat(kSelectJob, "WHERE uid = ?"));
  if (!stmt.ok()) return stmt.status();
  stmt->BindText(1, uid);
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<Job>();
  absl::StatusOr<Job> job = ReadJob(*stmt);
  if (!job.ok()) return job.status();
  return std::optional<Job>(*std::move(job));
}

absl::StatusOr<std::vector<Job>> Database::ListJobs(std::optional<JobState> state) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  absl::StatusOr<Statement> stmt =
      state.has_value()
          ? impl_->conn->Prepare(absl::StrCat(kSelectJob, "WHERE state = ? ORDER BY id"))
          : impl_->conn->Prepare(absl::StrCat(kSelectJob, "ORDER BY id"));
  if (!stmt.ok()) return stmt.status();
  if (state.has_value()) stmt->BindText(1, JobStateName(*state));
  std::vector<Job> out;
  while (true) {
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    absl::StatusOr<Job> job = ReadJob(*stmt);
    if (!job.ok()) return job.status();
    out.push_back(*std::move(job));
  }
}

}  // namespace lathe::db
