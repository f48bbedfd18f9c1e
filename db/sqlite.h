// \file
// Internal to lathe::db: the SQLite store behind internal::Connection (sql.h). SQLite's result
// codes are converted to absl::Status here and nowhere else. The sqlite3 types are only
// forward-declared, so this header does not pull in <sqlite3.h>; it is not part of the public
// interface of lathe::db.
#ifndef LATHE_DB_SQLITE_H_
#define LATHE_DB_SQLITE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "db/sql.h"

struct sqlite3;

namespace lathe::db::internal {

// One SQLite connection. Not thread-safe: the owner serializes access.
class SqliteConnection : public Connection {
 public:
  // Opens `path` with sqlite3_open_v2 `flags`; sets extended result codes, the busy timeout
  // and defensive mode. Writes nothing to the file.
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(const std::string& path, int flags,
                                                                int busy_timeout_ms);
  ~SqliteConnection() override;

  absl::Status Exec(std::string_view sql, std::string_view what) override;
  absl::Status BeginWrite() override;
  absl::Status BeginRead() override;
  bool InTransaction() const override;
  absl::StatusOr<int64_t> SchemaVersion() override;
  absl::StatusOr<std::vector<std::string>> IntegrityCheck() override;
  // A file has one daemon: always granted.
  absl::StatusOr<bool> ClaimJob(const std::string& uid) override;
  absl::Status ReleaseJob(const std::string& uid) override;

  const std::string& path() const { return location(); }
  sqlite3* raw() const { return db_; }

  // Converts a SQLite result code into a status naming the database and the action.
  absl::Status Error(int rc, std::string_view what) const;

 protected:
  absl::StatusOr<std::unique_ptr<StatementImpl>> PrepareNew(std::string_view sql) override;

 private:
  SqliteConnection(sqlite3* db, std::string path) : Connection(std::move(path)), db_(db) {}
  sqlite3* db_;
};

}  // namespace lathe::db::internal

#endif  // LATHE_DB_SQLITE_H_
