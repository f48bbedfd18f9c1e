#include "db/database.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "db/database_impl.h"
#include "db/location.h"
#include "db/postgres.h"
#include "db/sqlite.h"

namespace lathe::db {
namespace {

using internal::Connection;
using internal::SqliteConnection;

constexpr char kSqliteMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f',
                                   'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};

// What Open learns about the file before SQLite touches it.
struct FileState {
  bool exists = false;
  bool empty = true;
};

absl::StatusOr<FileState> InspectFile(const std::string& path) {
  FileState state;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return state;
    return absl::PermissionDeniedError(
        absl::StrCat("database ", path, ": cannot stat: ", std::strerror(errno)));
  }
  state.exists = true;
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("database ", path, ": not a regular file"));
  }
  state.empty = st.st_size == 0;
  if (state.empty) return state;
  char header[sizeof(kSqliteMagic)] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(absl::StrCat("database ", path, ": cannot read"));
  }
  in.read(header, sizeof(header));
  // A SQLite file is at least one 512-byte page; its first 16 bytes are the magic string.
  if (st.st_size < 512 || in.gcount() != sizeof(header) ||
      std::memcmp(header, kSqliteMagic, sizeof(header)) != 0) {
    return absl::DataLossError(absl::StrCat("database ", path, ": file is not a database"));
  }
  return state;
}

// Status of a failed read during validation: SQLite's "not a database" / "malformed" are
// reported as the file being unusable, and that nothing was changed.
absl::Status Refuse(const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat(st.message(), " (the file was not modified)"));
}

// Validates an existing, non-empty file read-only. Returns whether quick_check ran.
absl::Status ValidateExisting(SqliteConnection& conn, const OpenOptions& options) {
  const std::string& path = conn.path();
  absl::StatusOr<int64_t> version = conn.QueryInt64("PRAGMA user_version");
  if (!version.ok()) return Refuse(version.status());
  if (*version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path, ": schema version ", *version, " is newer than this lathe supports (",
        kSchemaVersion, "); use a newer lathe (the file was not modified)"));
  }
  // Parses the whole schema: catches a damaged sqlite_schema table.
  absl::StatusOr<int64_t> tables =
      conn.QueryInt64("SELECT count(*) FROM sqlite_schema WHERE type = 'table'");
  if (!tables.ok()) return Refuse(tables.status());
  if (*version == 0 && *tables > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", path,
        ": not a lathe database (schema version 0 with existing tables; the file was not "
        "modified)"));
  }
  absl::StatusOr<std::string> mode = conn.QueryText("PRAGMA journal_mode");
  if (!mode.ok()) return Refuse(mode.status());
  bool will_modify = *mode != "wal" || *version < kSchemaVersion;
  if (!will_modify && !options.quick_check) return absl::OkStatus();

  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat("database ", path, ": corrupt: ", what, " (the file was not modified)"));
  };
  absl::StatusOr<internal::Statement> check = conn.Prepare("PRAGMA quick_check(20)");
  if (!check.ok()) return Refuse(check.status());
  std::vector<std::string> problems;
  while (true) {
    absl::StatusOr<bool> row = check->Step();
    if (!row.ok()) {
      if (absl::IsDataLoss(row.status()))
        return corrupt("quick_check stopped: the b-tree is malformed");
      return Refuse(row.status());
    }
    if (!*row) break;
    std::string line = check->ColumnText(0);
    if (line != "ok") problems.push_back(std::move(line));
  }
  if (problems.empty()) return absl::OkStatus();
  return corrupt(absl::StrCat(problems.front(), problems.size() > 1 ? " (and more)" : ""));
}

// Switches to WAL, retrying while another connection holds a lock (the busy handler does not
// cover every path of a journal-mode change).
absl::Status EnableWal(SqliteConnection& conn, int busy_timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  while (true) {
    absl::StatusOr<std::string> mode = conn.QueryText("PRAGMA journal_mode = WAL");
    if (mode.ok() && *mode == "wal") return absl::OkStatus();
    if (mode.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database ", conn.path(), ": cannot switch to WAL (journal mode is ", *mode, ")"));
    }
    if (!absl::IsUnavailable(mode.status()) || std::chrono::steady_clock::now() > deadline) {
      return mode.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<std::unique_ptr<Connection>> OpenSqlite(const std::string& path,
                                                       const OpenOptions& options) {
  absl::StatusOr<FileState> file = InspectFile(path);
  if (!file.ok()) return file.status();
  if (!file->exists && !options.create_if_missing) {
    return absl::NotFoundError(absl::StrCat("database ", path, ": no such file"));
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (options.create_if_missing) flags |= SQLITE_OPEN_CREATE;
  absl::StatusOr<std::unique_ptr<SqliteConnection>> conn =
      SqliteConnection::Open(path, flags, options.busy_timeout_ms);
  if (!conn.ok()) return conn.status();
  SqliteConnection& c = **conn;

  if (file->exists && !file->empty) {
    if (absl::Status st = ValidateExisting(c, options); !st.ok()) return st;
  }
  if (absl::Status st = EnableWal(c, options.busy_timeout_ms); !st.ok()) return st;
  // Results are acknowledged only after a durable commit.
  if (absl::Status st =
          c.Exec("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;", "configure connection");
      !st.ok()) {
    return st;
  }
  if (absl::Status st = internal::Migrate(c); !st.ok()) return st;
  return std::unique_ptr<Connection>(std::move(*conn));
}

absl::StatusOr<std::unique_ptr<Connection>> OpenPostgres(const DatabaseLocation& loc,
                                                         const OpenOptions& options) {
  absl::StatusOr<std::unique_ptr<internal::PgConnection>> conn =
      internal::PgConnection::Connect(loc.target, loc.display, options.busy_timeout_ms);
  if (!conn.ok()) return conn.status();
  if (absl::Status st = internal::MigratePostgres(**conn, options); !st.ok()) return st;
  return std::unique_ptr<Connection>(std::move(*conn));
}

}  // namespace

Database::Database(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Database::~Database() = default;

const std::string& Database::path() const { return impl_->conn->location(); }

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path,
                                                         const OpenOptions& options) {
  absl::StatusOr<DatabaseLocation> loc = ParseDatabaseLocation(path);
  if (!loc.ok()) return loc.status();
  absl::StatusOr<std::unique_ptr<Connection>> conn = loc->kind == StoreKind::kPostgres
                                                         ? OpenPostgres(*loc, options)
                                                         : OpenSqlite(loc->target, options);
  if (!conn.ok()) return conn.status();
  auto impl = std::make_unique<Impl>();
  impl->conn = std::move(*conn);
  return std::unique_ptr<Database>(new Database(std::move(impl)));
}

absl::StatusOr<int> Database::SchemaVersion() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  absl::StatusOr<int64_t> v = impl_->conn->SchemaVersion();
  if (!v.ok()) return v.status();
  return static_cast<int>(*v);
}

absl::StatusOr<std::vector<std::string>> Database::IntegrityCheck() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->conn->IntegrityCheck();
}

absl::StatusOr<bool> Database::ClaimJob(const std::string& uid) {
  if (uid.empty()) return absl::InvalidArgumentError("job: empty uid");
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->conn->ClaimJob(uid);
}

absl::Status Database::ReleaseJob(const std::string& uid) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->conn->ReleaseJob(uid);
}

}  // namespace lathe::db
