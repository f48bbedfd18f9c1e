// Schema versions of the tuning database and the forward migrations between them.
//
//   v1: workloads, device_classes, records (no cv/flops/lathe_version), index by median.
//   v2: records gain cv, flops, lathe_version, inserted_at; the best-record index covers the
//       error class; cost_models and jobs tables.
//   v3: records gain remeasured_at (when a careful re-measurement last added repeats).
//   v4: features: the cost model's input for a record's program, stored by candidate id where
//       the program was lowered for the search, so that no start re-lowers every record.
//
// A migration never drops a record. New files run every migration from version 0.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "db/database_impl.h"
#include "db/record.h"

namespace lathe::db::internal {

const char kSchemaV1[] = R"sql(
CREATE TABLE workloads(
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  spec TEXT NOT NULL
);
CREATE TABLE device_classes(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE records(
  id INTEGER PRIMARY KEY,
  candidate_id TEXT NOT NULL UNIQUE,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  device_class_id INTEGER NOT NULL REFERENCES device_classes(id),
  trace_json TEXT NOT NULL,
  repeats BLOB NOT NULL,
  median_us REAL NOT NULL,
  error_class TEXT NOT NULL,
  error_msg TEXT NOT NULL DEFAULT '',
  worker TEXT NOT NULL DEFAULT '',
  measured_at INTEGER NOT NULL
);
CREATE INDEX records_by_workload ON records(workload_id, device_class_id, median_us);
)sql";

namespace {

constexpr char kSchemaV2[] = R"sql(
ALTER TABLE records ADD COLUMN cv REAL NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN flops REAL NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN lathe_version TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN inserted_at INTEGER NOT NULL DEFAULT 0;
UPDATE records SET inserted_at = measured_at;
DROP INDEX records_by_workload;
CREATE INDEX records_best ON records(workload_id, device_class_id, error_class, median_us);
CREATE TABLE cost_models(
  device_class_id INTEGER PRIMARY KEY REFERENCES device_classes(id),
  format TEXT NOT NULL,
  model BLOB NOT NULL,
  trained_on INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE TABLE jobs(
  id INTEGER PRIMARY KEY,
  uid TEXT NOT NULL UNIQUE,
  spec_json TEXT NOT NULL,
  device_class TEXT NOT NULL,
  state TEXT NOT NULL,
  trials_requested INTEGER NOT NULL,
  trials_done INTEGER NOT NULL DEFAULT 0,
  error_msg TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX jobs_by_state ON jobs(state, id);
)sql";

constexpr char kSchemaV3[] = R"sql(
ALTER TABLE records ADD COLUMN remeasured_at INTEGER NOT NULL DEFAULT 0;
)sql";

constexpr char kSchemaV4[] = R"sql(
CREATE TABLE features(
  candidate_id TEXT PRIMARY KEY,
  version INTEGER NOT NULL,
  num_rows INTEGER NOT NULL,
  num_cols INTEGER NOT NULL,
  data BLOB NOT NULL
) WITHOUT ROWID;
)sql";

absl::Status MigrateTo1(Connection& conn) { return conn.Exec(kSchemaV1, "migrate to schema v1"); }

absl::Status MigrateTo2(Connection& conn) {
  if (absl::Status st = conn.Exec(kSchemaV2, "migrate to schema v2"); !st.ok()) return st;
  // v1 records have no coefficient of variation; derive it from the stored repeats.
  absl::StatusOr<Statement> select = conn.Prepare("SELECT id, repeats FROM records");
  if (!select.ok()) return select.status();
  std::vector<std::pair<int64_t, double>> cvs;
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    std::vector<double> repeats = DecodeRepeats(select->ColumnBlob(1));
    double cv = CoefficientOfVariation(repeats);
    if (cv != 0) cvs.emplace_back(select->ColumnInt64(0), cv);
  }
  for (const auto& [id, cv] : cvs) {
    absl::StatusOr<Statement> update = conn.Prepare("UPDATE records SET cv = ? WHERE id = ?");
    if (!update.ok()) return update.status();
    update->BindDouble(1, cv).BindInt64(2, id);
    if (absl::Status st = update->Run(); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status MigrateTo3(Connection& conn) { return conn.Exec(kSchemaV3, "migrate to schema v3"); }

absl::Status MigrateTo4(Connection& conn) { return conn.Exec(kSchemaV4, "migrate to schema v4"); }

using MigrationFn = absl::Status (*)(Connection&);
// kMigrations[i] takes the schema from version i to version i + 1.
constexpr MigrationFn kMigrations[] = {MigrateTo1, MigrateTo2, MigrateTo3, MigrateTo4};
static_assert(std::size(kMigrations) == kSchemaVersion);

}  // namespace

absl::Status Migrate(Connection& conn) {
  absl::StatusOr<int64_t> before = conn.QueryInt64("PRAGMA user_version");
  if (!before.ok()) return before.status();
  if (*before == kSchemaVersion) return absl::OkStatus();

  absl::StatusOr<Transaction> txn = Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  // Another connection may have migrated while this one waited for the write lock.
  absl::StatusOr<int64_t> version = conn.QueryInt64("PRAGMA user_version");
  if (!version.ok()) return version.status();
  if (*version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", conn.location(), ": schema version ", *version,
                     " is newer than this lathe supports (", kSchemaVersion, ")"));
  }
  for (int64_t v = *version; v < kSchemaVersion; ++v) {
    if (absl::Status st = kMigrations[v](conn); !st.ok()) return st;
  }
  if (absl::Status st =
          conn.Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion), "set schema version");
      !st.ok()) {
    return st;
  }
  return txn->Commit();
}

}  // namespace lathe::db::internal
