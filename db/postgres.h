// \file
// Internal to lathe::db: the PostgreSQL store behind internal::Connection (sql.h), over libpq.
// libpq's types are only forward-declared and its SQLSTATEs are converted to absl::Status here
// and nowhere else. Statements are prepared on the server, parameters and results travel in
// binary form; every text column is BYTEA, so text is stored byte-exact as in SQLite (NUL
// bytes and invalid UTF-8 included). Not part of the public interface of lathe::db.
#ifndef LATHE_DB_POSTGRES_H_
#define LATHE_DB_POSTGRES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "db/database.h"
#include "db/sql.h"

struct pg_conn;
struct pg_result;

namespace lathe::db::internal {

// One libpq connection (one server session). Not thread-safe: the owner serializes access.
class PgConnection : public Connection {
 public:
  // Connects to `url` (libpq URI; `display` is what messages print instead). Sets the session
  // up: lock_timeout = lock_timeout_ms, synchronous_commit on when the server has it off, no
  // notices on stderr. Unavailable when the server cannot be reached, NotFound for a missing
  // database, PermissionDenied when authentication fails.
  static absl::StatusOr<std::unique_ptr<PgConnection>> Connect(const std::string& url,
                                                               const std::string& display,
                                                               int lock_timeout_ms);
  ~PgConnection() override;

  absl::Status Exec(std::string_view sql, std::string_view what) override;
  absl::Status BeginWrite() override;
  absl::Status BeginRead() override;
  absl::Status CommitTransaction() override;
  bool InTransaction() const override;
  const char* LockRecordClause() const override { return " FOR UPDATE OF r"; }
  absl::StatusOr<int64_t> SchemaVersion() override;
  absl::StatusOr<std::vector<std::string>> IntegrityCheck() override;
  // A session-level advisory lock keyed by the uid's hash: held until released or until the
  // session ends (the daemon exits or dies), so a killed daemon's jobs are free to resume.
  absl::StatusOr<bool> ClaimJob(const std::string& uid) override;
  absl::Status ReleaseJob(const std::string& uid) override;

  // A status for a failed result (null: the connection failed) naming the database and the
  // action; the SQLSTATE picks the code.
  absl::Status Error(const pg_result* res, std::string_view what) const;
  pg_conn* raw() const { return conn_; }
  // A fresh server-side statement name.
  std::string NextStatementName() { return "lathe_" + std::to_string(next_statement_++); }
  bool closing() const { return closing_; }
  // Counts sessions: a statement prepared in an earlier one is prepared again.
  uint64_t generation() const { return generation_; }
  // Before a statement: when the server dropped the session (a restart, a network cut) and no
  // transaction was open in it, opens a new session (set up as Connect does, the jobs claimed
  // again); inside a transaction the loss is an error (Unavailable), never silently a new
  // session that would commit half of it.
  // `force`: the caller saw the session fail though libpq still calls it open.
  absl::Status EnsureSession(bool force = false);

 protected:
  absl::StatusOr<std::unique_ptr<StatementImpl>> PrepareNew(std::string_view sql) override;

 private:
  PgConnection(pg_conn* conn, std::string display, int lock_timeout_ms)
      : Connection(std::move(display)), conn_(conn), lock_timeout_ms_(lock_timeout_ms) {}
  absl::Status SetUpSession();

  pg_conn* conn_;
  const int lock_timeout_ms_;
  int64_t next_statement_ = 0;
  uint64_t generation_ = 0;
  bool closing_ = false;
  bool in_transaction_ = false;       // between Begin* and COMMIT/ROLLBACK, as this side saw it
  std::vector<std::string> claimed_;  // job uids claimed in this session
};

// Creates the schema in an empty database, or checks an existing one (schema version not newer
// than kSchemaVersion; a database holding other tables named like lathe's but no lathe schema is
// refused), under an advisory lock, so daemons starting at once on one
// database create it once. NotFound when there is no schema and !options.create_if_missing.
absl::Status MigratePostgres(PgConnection& conn, const OpenOptions& options);

}  // namespace lathe::db::internal

#endif  // LATHE_DB_POSTGRES_H_
