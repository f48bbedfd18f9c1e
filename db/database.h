// \file
// The tuning database: workloads, device classes, measurement records, cost-model blobs per
// device class and tuning jobs, in one of two stores with the same semantics:
//  - a SQLite file in WAL mode (the embedded default). Opening validates the file before
//    anything is written (a file that is not a database, is corrupt, or has a newer schema is
//    refused untouched) and migrates older schemas forward;
//  - a PostgreSQL database named by a `postgresql://` URL (db/location.h), which several
//    daemons share. Opening creates or checks the schema under an advisory lock, so daemons
//    that start at once on one database create it once.
// On both, a write is durable when it returns, inserts are idempotent by candidate id, and
// bad input fails with the same status codes.
//
// Thread-safety: a Database is one connection; its methods are serialized by an internal
// mutex, so one object may be shared by threads. For parallel readers, open one Database per
// thread: SQLite's WAL (and PostgreSQL) lets readers run beside the writer, and lock waits are
// absorbed by the busy timeout (nothing reaches the caller unless the timeout expires, as
// Unavailable). Several processes may open the same file or PostgreSQL database.
#ifndef LATHE_DB_DATABASE_H_
#define LATHE_DB_DATABASE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "db/record.h"

namespace lathe::db {

// The schema version this code writes (PRAGMA user_version). Older files are migrated on
// open; newer ones are refused.
inline constexpr int kSchemaVersion = 4;

struct OpenOptions {
  // Create the file when it does not exist (its directory must exist). When false, a missing
  // file is NotFound.
  bool create_if_missing = true;
  // How long a statement waits for a lock held by another connection before failing with
  // Unavailable.
  int busy_timeout_ms = 30000;
  // Run PRAGMA quick_check on every open of an existing file. It always runs before the file
  // is switched to WAL or migrated; this makes it unconditional (O(file size)).
  bool quick_check = false;
};

// A cost model saved for a device class (used by the search to warm-start).
struct CostModelBlob {
  std::string device_class;
  std::string format;         // e.g. "xgboost-ubj-1"
  std::string model;          // opaque bytes
  int64_t trained_on = 0;     // records the model was trained on
  int64_t updated_at_ms = 0;  // set by the database
};

// The cost model's input for a record's program (opaque here: cost_model/database_io.h reads
// and writes it), stored where the program was lowered for the search so that nothing is
// lowered again to train a model on stored records.
struct StoredFeatures {
  std::string candidate_id;
  int64_t version = 0;  // of the feature layout; readers skip other versions
  int64_t num_rows = 0;
  int64_t num_cols = 0;
  std::string data;  // num_rows x num_cols float32, native byte order
};

// A tuning job (used by the daemon).
enum class JobState { kQueued, kRunning, kDone, kFailed, kCancelled };
std::string_view JobStateName(JobState state);  // "queued", "running", ...
absl::StatusOr<JobState> ParseJobState(std::string_view name);

struct Job {
  std::string uid;        // unique, chosen by the creator
  std::string spec_json;  // the job's description (workloads, options), opaque JSON text
  std::string device_class;
  JobState state = JobState::kQueued;
  int64_t trials_requested = 0;
  int64_t trials_done = 0;
  std::string error_msg;
  int64_t created_at_ms = 0;  // set by the database
  int64_t updated_at_ms = 0;  // set by the database
};

class Database {
 public:
  // Opens (or creates) the database at `path`: a SQLite file path, or a PostgreSQL URL
  // (`postgresql://` or `postgres://`; any other `scheme://` is InvalidArgument naming the
  // scheme, and a URL is never taken for a file path). For a file, before writing anything
  // it checks that an existing non-empty file has the SQLite header, that its schema is
  // readable, that its user_version is not newer than kSchemaVersion, and runs quick_check
  // when it will switch the file to WAL or migrate it. For PostgreSQL it connects, then
  // creates the schema in a database without one, or checks its version. Failures: NotFound
  // (missing file or schema with !create_if_missing, missing PostgreSQL database), DataLoss
  // (not a database, corrupt: "database PATH: file is not a database"), FailedPrecondition
  // (schema newer than this code, a PostgreSQL database with foreign tables of lathe's
  // names), PermissionDenied (cannot open, authentication failed), Unavailable (server
  // unreachable).
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        const OpenOptions& options = {});
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // The file path, or the PostgreSQL URL without its password.
  const std::string& path() const;
  // The schema version of the open file (== kSchemaVersion after Open).
  absl::StatusOr<int> SchemaVersion();

  // --- records (records.cc) ---

  // Inserts one record in its own transaction; durable when this returns. When the record's
  // candidate id is already present, nothing is written and the existing row id is returned
  // (inserted=false). An empty candidate id is replaced by a deterministic hash of the
  // record's content. median_us and cv are computed from repeats_us when median_us is 0 and
  // repeats are given. InvalidArgument for an empty workload key, spec or device class, a
  // non-finite or negative median, an ok record without a positive median, or a workload key
  // already used by a different canonical spec.
  absl::StatusOr<InsertResult> Insert(const Record& record);
  // Inserts records in one transaction (e.g. a measurement round): all or nothing, durable
  // when this returns. Concurrent calls on one Database share a transaction and its commit
  // (group commit: one fsync for all of them); each call stays all or nothing (a savepoint of
  // its own) and gets its own error, except when the shared commit fails, which fails all.
  absl::StatusOr<std::vector<InsertResult>> InsertBatch(std::span<const Record> records);

  // Adds the repeats of a careful re-measurement to an ok record (the tuner re-times its best
  // few candidates for longer before it reports them, so that one lucky short measurement
  // cannot become the best): the record keeps every repeat it had, median_us and cv are
  // recomputed over all of them, remeasured_at_ms is set to `measured_at_ms`. Durable when
  // this returns; returns the updated record. NotFound for an unknown candidate id,
  // FailedPrecondition for a record that is not ok, InvalidArgument for no repeats or a
  // repeat that is not a positive finite duration.
  absl::StatusOr<Record> AddRepeats(const std::string& candidate_id,
                                    std::span<const double> repeats_us, int64_t measured_at_ms);

  // The best record for (workload key, device class): the lowest median among ok records
  // (ties: the earliest inserted). nullopt when there is none.
  absl::StatusOr<std::optional<Record>> Best(const std::string& workload_key,
                                             const std::string& device_class);
  // Up to `k` ok records, fastest first.
  absl::StatusOr<std::vector<Record>> TopK(const std::string& workload_key,
                                           const std::string& device_class, int k);
  // The best ok records of other workloads of the same operator: up to `per_workload` of
  // each workload whose spec starts with `op` + ":" (other than `exclude_key`), at most `k`
  // in all, each workload's best first. Seeds for a workload never tuned before.
  absl::StatusOr<std::vector<Record>> TopOfRelatedWorkloads(const std::string& op,
                                                            const std::string& device_class,
                                                            const std::string& exclude_key,
                                                            int per_workload, int k);
  // The traces already measured (any error class) for the workload on the device class, or
  // on any device class when `device_class` is empty. A search skips these, so a stopped run
  // resumes without measuring a candidate twice.
  absl::StatusOr<std::vector<std::string>> MeasuredTraces(const std::string& workload_key,
                                                          const std::string& device_class);
  // Every record of the workload on the device class (any error class), in the order they
  // were measured (measured_at, then insertion): the trials of its tuning curve. Empty for an
  // unknown workload or device class.
  absl::StatusOr<std::vector<TimelinePoint>> Timeline(const std::string& workload_key,
                                                      const std::string& device_class);
  // The record with this candidate id, or nullopt.
  absl::StatusOr<std::optional<Record>> GetByCandidateId(const std::string& candidate_id);
  // Whether a record is stored for each candidate id, in order: one lock and one cached
  // statement for all of them, reading no record (lathed checks each round it dispatches).
  absl::StatusOr<std::vector<bool>> HasCandidates(std::span<const std::string> candidate_ids);
  // The canonical spec stored for a workload key, or nullopt when the key is unknown.
  absl::StatusOr<std::optional<std::string>> WorkloadSpecForKey(const std::string& key);
  // Device classes holding at least one ok record for the workload, each with its count.
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> DeviceClassesWithOkRecords(
      const std::string& workload_key);
  // Calls `fn` for every record in insertion order, stopping at the first error it returns.
  // `fn` must not call back into this Database (the connection is held).
  absl::Status ForEachRecord(const std::function<absl::Status(const Record&)>& fn);
  // Database-wide counts.
  absl::StatusOr<Stats> GetStats();

  // --- program features (store.cc) ---

  // Stores (replaces) features by candidate id, all in one transaction. InvalidArgument for an
  // empty candidate id or data whose size is not num_rows x num_cols floats.
  absl::Status PutFeatures(std::span<const StoredFeatures> features);
  // The stored features of each candidate id, in order; nullopt where none is stored.
  absl::StatusOr<std::vector<std::optional<StoredFeatures>>> GetFeatures(
      std::span<const std::string> candidate_ids);

  // --- cost models and jobs (store.cc) ---

  // Saves (replaces) the cost model of a device class.
  absl::Status PutCostModel(const CostModelBlob& blob);
  // The saved cost model of a device class, or nullopt.
  absl::StatusOr<std::optional<CostModelBlob>> GetCostModel(const std::string& device_class);

  // Creates a job; AlreadyExists when the uid is taken.
  absl::Status CreateJob(const Job& job);
  // Updates state, trials done and error message; NotFound for an unknown uid.
  absl::Status UpdateJob(const std::string& uid, JobState state, int64_t trials_done,
                         const std::string& error_msg);
  // UpdateJob, and replaces the job's spec_json in the same transaction (lathed keeps each
  // workload's progress there, so that a resumed job knows its own trials); NotFound for an
  // unknown uid.
  absl::Status UpdateJobAndSpec(const std::string& uid, JobState state, int64_t trials_done,
                                const std::string& error_msg, const std::string& spec_json);
  absl::StatusOr<std::optional<Job>> GetJob(const std::string& uid);
  // Jobs in creation order, only those in `state` when given.
  absl::StatusOr<std::vector<Job>> ListJobs(std::optional<JobState> state = std::nullopt);
  // Marks the job as run through this Database until it is closed (or the job released), so
  // that daemons sharing a PostgreSQL store never run one job twice: false when another open
  // Database holds it. A daemon that dies releases its jobs with its connection. On a SQLite
  // file (one daemon) always true. Claiming a uid before its job exists is allowed.
  absl::StatusOr<bool> ClaimJob(const std::string& uid);
  absl::Status ReleaseJob(const std::string& uid);

  // --- maintenance (database.cc) ---

  // SQLite: runs PRAGMA integrity_check (full, O(file size)); PostgreSQL: checks what the
  // schema's constraints do not (the server keeps its own files sound). Returns the problems
  // found, empty when the store is sound.
  absl::StatusOr<std::vector<std::string>> IntegrityCheck();

  struct Impl;

 private:
  explicit Database(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::db

#endif  // LATHE_DB_DATABASE_H_
