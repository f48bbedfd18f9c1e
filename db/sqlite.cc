#include "db/sqlite.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace lathe::db::internal {
namespace {

// One sqlite3_stmt, finalized with the object.
class SqliteStatement : public StatementImpl {
 public:
  SqliteStatement(const SqliteConnection* conn, sqlite3_stmt* stmt) : conn_(conn), stmt_(stmt) {}
  ~SqliteStatement() override { sqlite3_finalize(stmt_); }

  void BindText(int index, std::string_view text) override {
    // An empty view may have a null data pointer, which SQLite would store as NULL.
    const char* data = text.data() != nullptr ? text.data() : "";
    NoteBind(sqlite3_bind_text64(stmt_, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
             index);
  }
  void BindBlob(int index, std::string_view bytes) override {
    const char* data = bytes.data() != nullptr ? bytes.data() : "";
    NoteBind(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT), index);
  }
  void BindInt64(int index, int64_t value) override {
    NoteBind(sqlite3_bind_int64(stmt_, index, value), index);
  }
  void BindDouble(int index, double value) override {
    NoteBind(sqlite3_bind_double(stmt_, index, value), index);
  }
  void BindNull(int index) override { NoteBind(sqlite3_bind_null(stmt_, index), index); }

  absl::StatusOr<bool> Step() override {
    if (!bind_status_.ok()) return bind_status_;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    const char* sql = sqlite3_sql(stmt_);
    std::string head = sql != nullptr ? std::string(sql).substr(0, 40) : "statement";
    return conn_->Error(rc, absl::StrCat("run '", head, "'"));
  }

  int64_t ColumnInt64(int col) const override { return sqlite3_column_int64(stmt_, col); }
  double ColumnDouble(int col) const override { return sqlite3_column_double(stmt_, col); }
  std::string ColumnText(int col) const override {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    if (p == nullptr || n <= 0) return std::string();
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  std::string ColumnBlob(int col) const override {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    if (p == nullptr || n <= 0) return std::string();
    return std::string(static_cast<const char*>(p), static_cast<size_t>(n));
  }
  bool ColumnIsNull(int col) const override {
    return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
  }

  void Reset() override {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    bind_status_ = absl::OkStatus();
  }

 private:
  void NoteBind(int rc, int index) {
    if (rc == SQLITE_OK || !bind_status_.ok()) return;
    bind_status_ = conn_->Error(rc, absl::StrCat("bind parameter ", index));
  }

  const SqliteConnection* conn_;
  sqlite3_stmt* stmt_;
  absl::Status bind_status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteConnection>> SqliteConnection::Open(const std::string& path,
                                                                         int flags,
                                                                         int busy_timeout_ms) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_EXRESCODE, nullptr);
  std::unique_ptr<SqliteConnection> conn(new SqliteConnection(db, path));
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

SqliteConnection::~SqliteConnection() {
  ClearCache();
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status SqliteConnection::Error(int rc, std::string_view what) const {
  std::string detail = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  std::string msg = absl::StrCat("database ", path(), ": ", std::string(what), ": ", detail);
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

absl::Status SqliteConnection::Exec(std::string_view sql, std::string_view what) {
  std::string text(sql);
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, what);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StatementImpl>> SqliteConnection::PrepareNew(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, absl::StrCat("prepare '", std::string(sql.substr(0, 40)), "'"));
  }
  return std::make_unique<SqliteStatement>(this, stmt);
}

absl::Status SqliteConnection::BeginWrite() {
  return Exec("BEGIN IMMEDIATE", "begin write transaction");
}

absl::Status SqliteConnection::BeginRead() { return Exec("BEGIN", "begin read transaction"); }

bool SqliteConnection::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

absl::StatusOr<int64_t> SqliteConnection::SchemaVersion() {
  return QueryInt64("PRAGMA user_version");
}

absl::StatusOr<std::vector<std::string>> SqliteConnection::IntegrityCheck() {
  absl::StatusOr<Statement> check = Prepare("PRAGMA integrity_check");
  if (!check.ok()) return check.status();
  std::vector<std::string> problems;
  while (true) {
    absl::StatusOr<bool> row = check->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    std::string line = check->ColumnText(0);
    if (line != "ok") problems.push_back(std::move(line));
  }
  return problems;
}

absl::StatusOr<bool> SqliteConnection::ClaimJob(const std::string&) { return true; }
absl::Status SqliteConnection::ReleaseJob(const std::string&) { return absl::OkStatus(); }

}  // namespace lathe::db::internal
