#include "db/sqlite.h"

#include <sqlite3.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lathe::db::internal {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------- Statement

Statement::Statement(Connection* conn, sqlite3_stmt* stmt, bool owned)
    : conn_(conn), stmt_(stmt), owned_(owned) {}

Statement::Statement(Statement&& other) noexcept
    : conn_(other.conn_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      owned_(other.owned_),
      bind_status_(std::move(other.bind_status_)) {}

Statement::~Statement() {
  if (stmt_ == nullptr) return;
  if (owned_) {
    sqlite3_finalize(stmt_);
    return;
  }
  conn_->Release(stmt_);
}

void Statement::NoteBind(int rc, int index) {
  if (rc == SQLITE_OK || !bind_status_.ok()) return;
  bind_status_ = conn_->Error(rc, absl::StrCat("bind parameter ", index));
}

Statement& Statement::BindText(int index, std::string_view text) {
  // An empty view may have a null data pointer, which SQLite would store as NULL.
  const char* data = text.data() != nullptr ? text.data() : "";
  NoteBind(sqlite3_bind_text64(stmt_, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
           index);
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  const char* data = bytes.data() != nullptr ? bytes.data() : "";
  NoteBind(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT), index);
  return *this;
}

Statement& Statement::BindInt64(int index, int64_t value) {
  NoteBind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::BindDouble(int index, double value) {
  NoteBind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::BindNull(int index) {
  NoteBind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (!bind_status_.ok()) return bind_status_;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const char* sql = sqlite3_sql(stmt_);
  std::string head = sql != nullptr ? std::string(sql).substr(0, 40) : "statement";
  return conn_->Error(rc, absl::StrCat("run '", head, "'"));
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t Statement::ColumnInt64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::ColumnDouble(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Statement::ColumnText(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  if (p == nullptr || n <= 0) return std::string();
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
}

std::string Statement::ColumnBlob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  if (p == nullptr || n <= 0) return std::string();
  return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
}

bool Statement::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

// ---------------------------------------------------------------------------- Connection

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path, int flags,
                                                             int busy_timeout_ms) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_EXRESCODE, nullptr);
  std::unique_ptr<Connection> conn(new Connection(db, path));
  if (rc != SQLITE_OK) {
    if (db == nullptr) return absl::ResourceExhaustedError("sqlite: out of memory");
    return conn->Error(rc, "open");
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  // Defensive mode: no writes to the schema or shadow tables through SQL, no
  // writable_schema, no PRAGMAs that could corrupt the file.
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  return conn;
}

Connection::~Connection() {
  for (auto& [sql, cached] : cache_) sqlite3_finalize(cached.stmt);
  cache_.clear();
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status Connection::Error(int rc, std::string_view what) const {
  std::string detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  std::string msg = absl::StrCat("database ", path_, ": ", std::string(what), ": ", detail);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
    case SQLITE_TOOBIG:
      return absl::ResourceExhaustedError(msg);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(msg);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(msg);
    case SQLITE_RANGE:
    case SQLITE_MISUSE:
    case SQLITE_ERROR:
      return absl::InternalError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status Connection::Exec(std::string_view sql, std::string_view what) {
  std::string text(sql);
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, what);
  return absl::OkStatus();
}

absl::StatusOr<Statement> Connection::Prepare(std::string_view sql) {
  std::string key(sql);
  auto it = cache_.find(key);
  if (it != cache_.end() && !it->second.in_use) {
    it->second.in_use = true;
    return Statement(this, it->second.stmt, /*owned=*/false);
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, key.data(), static_cast<int>(key.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, absl::StrCat("prepare '", key.substr(0, 40), "'"));
  }
  if (it != cache_.end()) return Statement(this, stmt, /*owned=*/true);  // cached one is busy
  cache_.emplace(std::move(key), Cached{stmt, true});
  return Statement(this, stmt, /*owned=*/false);
}

void Connection::Release(sqlite3_stmt* stmt) {
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  const char* sql = sqlite3_sql(stmt);
  if (sql == nullptr) return;
  auto it = cache_.find(sql);
  if (it != cache_.end() && it->second.stmt == stmt) it->second.in_use = false;
}

absl::StatusOr<std::string> Connection::QueryText(std::string_view sql) {
  absl::StatusOr<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::string();
  return stmt->ColumnText(0);
}

absl::StatusOr<int64_t> Connection::QueryInt64(std::string_view sql) {
  absl::StatusOr<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return int64_t{0};
  return stmt->ColumnInt64(0);
}

int64_t Connection::LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }
int Connection::Changes() const { return sqlite3_changes(db_); }

// ---------------------------------------------------------------------------- Transaction

absl::StatusOr<Transaction> Transaction::BeginImmediate(Connection& conn) {
  absl::Status st = conn.Exec("BEGIN IMMEDIATE", "begin write transaction");
  if (!st.ok()) return st;
  return Transaction(&conn);
}

Transaction::Transaction(Transaction&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)) {}

Transaction::~Transaction() {
  if (conn_ == nullptr) return;
  // Only roll back when a transaction is still open (a failed COMMIT may have ended it).
  if (sqlite3_get_autocommit(conn_->raw()) == 0) {
    sqlite3_exec(conn_->raw(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

absl::Status Transaction::Commit() {
  if (conn_ == nullptr) return absl::FailedPreconditionError("transaction already finished");
  absl::Status st = conn_->Exec("COMMIT", "commit");
  if (st.ok()) conn_ = nullptr;
  return st;
}

}  // namespace lathe::db::internal
