// \file
// Internal to lathe::db: the state behind Database (one connection to its store, SQLite or
// PostgreSQL, and the mutex that serializes it), shared by database.cc, records.cc and
// store.cc.
#ifndef LATHE_DB_DATABASE_IMPL_H_
#define LATHE_DB_DATABASE_IMPL_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "db/record.h"
#include "db/sql.h"

namespace lathe::db {

namespace internal {

// One InsertBatch call waiting for a group commit (records.cc).
struct PendingBatch {
  const std::vector<Record>* records = nullptr;      // validated
  absl::StatusOr<std::vector<InsertResult>> result;  // set by the leader before `done`
  bool done = false;
};

}  // namespace internal

struct Database::Impl {
  std::mutex mu;
  std::unique_ptr<internal::Connection> conn;

  // Group commit of InsertBatch: callers queue their batches under `group_mu`; one of them
  // (the leader) writes every queued batch in one transaction, each under its own savepoint,
  // and wakes the others after the commit. Lock order: group_mu is never held while `mu` is.
  std::mutex group_mu;
  std::condition_variable group_cv;
  std::vector<internal::PendingBatch*> group;
  bool committing = false;
};

namespace internal {

// Schema SQL and forward migrations of SQLite files (schema.cc; PostgreSQL's: postgres.h).
// Applies every migration from the file's user_version up to kSchemaVersion inside one
// BEGIN IMMEDIATE transaction; safe when several connections race to do it.
absl::Status Migrate(Connection& conn);

// The SQL that created schema version 1, kept for migration tests and for new files
// (which are built by running every migration from 0).
extern const char kSchemaV1[];

// Id of a workload / device class row, created when missing. Must run inside a write
// transaction. InvalidArgument when `key` is known with a different spec.
absl::StatusOr<int64_t> WorkloadId(Connection& conn, const std::string& key,
                                   const std::string& spec);
absl::StatusOr<int64_t> DeviceClassId(Connection& conn, const std::string& name);
// Ids for lookups: nullopt when absent (nothing is created).
absl::StatusOr<std::optional<int64_t>> FindWorkloadId(Connection& conn, const std::string& key);
absl::StatusOr<std::optional<int64_t>> FindDeviceClassId(Connection& conn, const std::string& name);

// Runs an `INSERT ... ON CONFLICT DO NOTHING RETURNING id`: the new row's id, or nullopt when
// the row was already there (inserted meanwhile by another writer of a shared store).
absl::StatusOr<std::optional<int64_t>> InsertReturningId(Statement& insert);

// Repeats are stored as a blob of little-endian float64.
std::string EncodeRepeats(const std::vector<double>& repeats);
std::vector<double> DecodeRepeats(const std::string& blob);

}  // namespace internal
}  // namespace lathe::db

#endif  // LATHE_DB_DATABASE_IMPL_H_
