// \file
// Internal to lathe::db: small RAII wrappers over the SQLite C API (connection, cached
// prepared statements, transactions). SQLite's error codes are converted to absl::Status here
// and nowhere else. The sqlite3 types are only forward-declared, so this header does not pull
// in <sqlite3.h>; it is not part of the public interface of lathe::db.
#ifndef LATHE_DB_SQLITE_H_
#define LATHE_DB_SQLITE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace lathe::db::internal {

class Connection;

// A prepared statement borrowed from its connection's cache. On destruction it is reset and
// its bindings are cleared, so the next user starts clean. Not thread-safe (nor is the
// connection it came from). Bind errors are remembered and reported by the next Step().
class Statement {
 public:
  Statement(Connection* conn, sqlite3_stmt* stmt, bool owned);
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Parameters are 1-based, `?` placeholders only. Text is bound with its explicit length, so
  // embedded NUL bytes and invalid UTF-8 are stored byte-exact.
  Statement& BindText(int index, std::string_view text);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindInt64(int index, int64_t value);
  Statement& BindDouble(int index, double value);
  Statement& BindNull(int index);

  // Steps once: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps to completion, ignoring rows.
  absl::Status Run();

  // Column accessors, 0-based; valid after Step() returned true.
  int64_t ColumnInt64(int col) const;
  double ColumnDouble(int col) const;
  std::string ColumnText(int col) const;  // byte-exact, may contain NUL
  std::string ColumnBlob(int col) const;
  bool ColumnIsNull(int col) const;

 private:
  void NoteBind(int rc, int index);

  Connection* conn_;
  sqlite3_stmt* stmt_;
  bool owned_;  // true when prepared outside the cache (the cached one was busy)
  absl::Status bind_status_;
};

// One SQLite connection with a cache of prepared statements. Not thread-safe: the owner
// serializes access.
class Connection {
 public:
  // Opens `path` with sqlite3_open_v2 `flags`; sets extended result codes, the busy timeout
  // and defensive mode. Writes nothing to the file.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path, int flags,
                                                          int busy_timeout_ms);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one or more statements without parameters.
  absl::Status Exec(std::string_view sql, std::string_view what);
  // Returns the cached prepared statement for `sql` (prepared on first use).
  absl::StatusOr<Statement> Prepare(std::string_view sql);
  // Runs a statement returning one row with one text column (e.g. a PRAGMA).
  absl::StatusOr<std::string> QueryText(std::string_view sql);
  absl::StatusOr<int64_t> QueryInt64(std::string_view sql);

  int64_t LastInsertRowid() const;
  int Changes() const;
  const std::string& path() const { return path_; }
  sqlite3* raw() const { return db_; }

  // Converts a SQLite result code into a status naming the database and the action.
  absl::Status Error(int rc, std::string_view what) const;

 private:
  friend class Statement;
  Connection(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  void Release(sqlite3_stmt* stmt);

  struct Cached {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  sqlite3* db_;
  std::string path_;
  std::unordered_map<std::string, Cached> cache_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back on destruction unless committed. Taking the write
// lock up front means a transaction never fails half-way with SQLITE_BUSY on lock upgrade.
class Transaction {
 public:
  static absl::StatusOr<Transaction> BeginImmediate(Connection& conn);
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();

  // Commits. With synchronous=FULL the data is durable when this returns ok.
  absl::Status Commit();

 private:
  explicit Transaction(Connection* conn) : conn_(conn) {}
  Connection* conn_;
};

// Current time as unix milliseconds.
int64_t NowMs();

}  // namespace lathe::db::internal

#endif  // LATHE_DB_SQLITE_H_
