// \file
// Internal to lathe::db: the small SQL interface that the tuning database's queries are
// written against once, and that each store implements (sqlite.h: a SQLite file;
// postgres.h: a PostgreSQL server). A Connection prepares statements (cached), runs
// transactions and answers the few questions whose SQL differs between the two (schema
// version, integrity check, job claims). The SQL given to it is the common dialect of
// SQLite 3.40 and PostgreSQL 15: `?` placeholders, `INSERT ... ON CONFLICT`, `RETURNING`,
// savepoints, window functions. Not part of the public interface of lathe::db.
#ifndef LATHE_DB_SQL_H_
#define LATHE_DB_SQL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lathe::db::internal {

// One prepared statement of a store. Bind errors are remembered and reported by the next
// Step(). Not thread-safe.
class StatementImpl {
 public:
  virtual ~StatementImpl() = default;
  // Parameters are 1-based. Text and blobs are bound byte-exact (NUL bytes, invalid UTF-8).
  virtual void BindText(int index, std::string_view text) = 0;
  virtual void BindBlob(int index, std::string_view bytes) = 0;
  virtual void BindInt64(int index, int64_t value) = 0;
  virtual void BindDouble(int index, double value) = 0;
  virtual void BindNull(int index) = 0;
  // Runs the statement on the first call; true while a row is available.
  virtual absl::StatusOr<bool> Step() = 0;
  virtual int64_t ColumnInt64(int col) const = 0;
  virtual double ColumnDouble(int col) const = 0;
  virtual std::string ColumnText(int col) const = 0;
  virtual std::string ColumnBlob(int col) const = 0;
  virtual bool ColumnIsNull(int col) const = 0;
  // Forgets bindings and results, so that the next user starts clean.
  virtual void Reset() = 0;
};

// A prepared statement borrowed from its connection's cache (or owned, when the cached one
// was busy); reset on destruction. Not thread-safe (nor is the connection it came from).
class Statement {
 public:
  Statement(StatementImpl* cached, bool* in_use) : impl_(cached), in_use_(in_use) {}
  explicit Statement(std::unique_ptr<StatementImpl> owned)
      : impl_(owned.get()), owned_(std::move(owned)) {}
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  Statement& BindText(int index, std::string_view text) {
    impl_->BindText(index, text);
    return *this;
  }
  Statement& BindBlob(int index, std::string_view bytes) {
    impl_->BindBlob(index, bytes);
    return *this;
  }
  Statement& BindInt64(int index, int64_t value) {
    impl_->BindInt64(index, value);
    return *this;
  }
  Statement& BindDouble(int index, double value) {
    impl_->BindDouble(index, value);
    return *this;
  }
  Statement& BindNull(int index) {
    impl_->BindNull(index);
    return *this;
  }

  // Steps once: true when a row is available, false when done.
  absl::StatusOr<bool> Step() { return impl_->Step(); }
  // Steps to completion, ignoring rows.
  absl::Status Run();

  // Column accessors, 0-based; valid after Step() returned true.
  int64_t ColumnInt64(int col) const { return impl_->ColumnInt64(col); }
  double ColumnDouble(int col) const { return impl_->ColumnDouble(col); }
  std::string ColumnText(int col) const { return impl_->ColumnText(col); }  // may hold NUL
  std::string ColumnBlob(int col) const { return impl_->ColumnBlob(col); }
  bool ColumnIsNull(int col) const { return impl_->ColumnIsNull(col); }

 private:
  StatementImpl* impl_;
  bool* in_use_ = nullptr;  // the cache slot's flag; null when owned
  std::unique_ptr<StatementImpl> owned_;
};

// One connection to a store, with a cache of prepared statements. Not thread-safe: the owner
// (Database) serializes access.
class Connection {
 public:
  virtual ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one or more statements without parameters.
  virtual absl::Status Exec(std::string_view sql, std::string_view what) = 0;
  // Returns the cached prepared statement for `sql` (prepared on first use).
  absl::StatusOr<Statement> Prepare(std::string_view sql);
  // Runs a statement returning one row with one column (0 / "" when it returns no row).
  absl::StatusOr<std::string> QueryText(std::string_view sql);
  absl::StatusOr<int64_t> QueryInt64(std::string_view sql);

  // Starts a write transaction that takes the store's write lock up front where the store has
  // one (SQLite: BEGIN IMMEDIATE), so that it never fails half-way on a lock upgrade.
  virtual absl::Status BeginWrite() = 0;
  // Starts a read-only transaction in which every statement sees one snapshot.
  virtual absl::Status BeginRead() = 0;
  // Commits the open transaction; an error when it was rolled back instead.
  virtual absl::Status CommitTransaction() { return Exec("COMMIT", "commit"); }
  // True while a transaction is open.
  virtual bool InTransaction() const = 0;

  // Appended to a SELECT of kSelectRecord's shape (alias `r`) that a write transaction
  // reads before it updates the row: locks the row where other writers could change it
  // meanwhile (PostgreSQL), nothing where the write lock is already held (SQLite).
  virtual const char* LockRecordClause() const { return ""; }

  // The schema version stored in the database (0 for a new one).
  virtual absl::StatusOr<int64_t> SchemaVersion() = 0;
  // The problems a full consistency check of the store finds; empty when sound.
  virtual absl::StatusOr<std::vector<std::string>> IntegrityCheck() = 0;
  // Marks the job `uid` as run through this connection until it is closed (or the job is
  // released); false when another open connection holds it. A store that one process owns
  // (a SQLite file) always grants it.
  virtual absl::StatusOr<bool> ClaimJob(const std::string& uid) = 0;
  virtual absl::Status ReleaseJob(const std::string& uid) = 0;

  // What the connection was opened on, as printed in messages (a PostgreSQL URL without its
  // password).
  const std::string& location() const { return location_; }

 protected:
  explicit Connection(std::string location) : location_(std::move(location)) {}
  virtual absl::StatusOr<std::unique_ptr<StatementImpl>> PrepareNew(std::string_view sql) = 0;
  // Finalizes every cached statement; a store's destructor calls it before it closes.
  void ClearCache() { cache_.clear(); }

 private:
  struct Cached {
    std::unique_ptr<StatementImpl> stmt;
    bool in_use = false;
  };
  std::string location_;
  std::unordered_map<std::string, Cached> cache_;
};

// A write transaction, rolled back on destruction unless committed.
class Transaction {
 public:
  static absl::StatusOr<Transaction> BeginImmediate(Connection& conn);
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();

  // Commits; the data is durable when this returns ok (SQLite: synchronous=FULL; PostgreSQL:
  // synchronous_commit on).
  absl::Status Commit();

 private:
  explicit Transaction(Connection* conn) : conn_(conn) {}
  Connection* conn_;
};

// Current time as unix milliseconds.
int64_t NowMs();

}  // namespace lathe::db::internal

#endif  // LATHE_DB_SQL_H_
