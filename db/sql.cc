#include "db/sql.h"

#include <chrono>
#include <utility>

namespace lathe::db::internal {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------- Statement

Statement::Statement(Statement&& other) noexcept
    : impl_(std::exchange(other.impl_, nullptr)),
      in_use_(std::exchange(other.in_use_, nullptr)),
      owned_(std::move(other.owned_)) {}

Statement::~Statement() {
  if (impl_ == nullptr) return;
  impl_->Reset();
  if (in_use_ != nullptr) *in_use_ = false;
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

// ---------------------------------------------------------------------------- Connection

absl::StatusOr<Statement> Connection::Prepare(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it != cache_.end() && !it->second.in_use) {
    it->second.in_use = true;
    return Statement(it->second.stmt.get(), &it->second.in_use);
  }
  absl::StatusOr<std::unique_ptr<StatementImpl>> made = PrepareNew(sql);
  if (!made.ok()) return made.status();
  if (it != cache_.end()) return Statement(*std::move(made));  // the cached one is busy
  Cached& slot = cache_[std::string(sql)];
  slot.stmt = *std::move(made);
  slot.in_use = true;
  return Statement(slot.stmt.get(), &slot.in_use);
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

// ---------------------------------------------------------------------------- Transaction

absl::StatusOr<Transaction> Transaction::BeginImmediate(Connection& conn) {
  if (absl::Status st = conn.BeginWrite(); !st.ok()) return st;
  return Transaction(&conn);
}

Transaction::Transaction(Transaction&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)) {}

Transaction::~Transaction() {
  if (conn_ == nullptr) return;
  // Only roll back when a transaction is still open (a failed COMMIT may have ended it).
  if (conn_->InTransaction()) conn_->Exec("ROLLBACK", "roll back").IgnoreError();
}

absl::Status Transaction::Commit() {
  if (conn_ == nullptr) return absl::FailedPreconditionError("transaction already finished");
  absl::Status st = conn_->CommitTransaction();
  if (st.ok()) conn_ = nullptr;
  return st;
}

}  // namespace lathe::db::internal
