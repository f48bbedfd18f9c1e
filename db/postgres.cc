#include "db/postgres.h"

#include <libpq-fe.h>

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lathe::db::internal {
namespace {

// Type OIDs of the parameters and results lathe uses (pg_type.dat; stable across releases).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kFloat4Oid = 700;
constexpr Oid kFloat8Oid = 701;

// The key of the advisory lock that serializes schema creation and migration.
constexpr int64_t kSchemaLockKey = 0x6c617468655f7631;  // "lathe_v1"

uint64_t ReadBigEndian(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

// `sql` with its `?` placeholders numbered `$1, $2, ...` (quoted strings and identifiers
// left alone); `*count` is set to the number of placeholders.
std::string NumberPlaceholders(std::string_view sql, int* count) {
  std::string out;
  out.reserve(sql.size() + 16);
  *count = 0;
  char quote = 0;
  for (char c : sql) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      out.push_back(c);
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out.push_back(c);
      continue;
    }
    if (c == '?') {
      absl::StrAppend(&out, "$", ++*count);
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// Owns a PGresult.
struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

bool Succeeded(const PGresult* res) {
  if (res == nullptr) return false;
  ExecStatusType s = PQresultStatus(res);
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK || s == PGRES_EMPTY_QUERY;
}

// Whether a failed statement found its session gone (no SQLSTATE: libpq's own error, e.g.
// "server closed the connection unexpectedly"; or the connection marked bad), as opposed to an
// error the server reported.
bool SessionLost(const PGconn* conn, const PGresult* res) {
  if (Succeeded(res)) return false;
  if (PQstatus(conn) == CONNECTION_BAD) return true;
  return res == nullptr || PQresultErrorField(res, PG_DIAG_SQLSTATE) == nullptr;
}

// One server-side prepared statement. The parameter types are those of the first execution's
// bindings; an execution binding other types prepares the statement again under a new name.
class PgStatement : public StatementImpl {
 public:
  PgStatement(PgConnection* conn, std::string sql, int num_params)
      : conn_(conn), sql_(std::move(sql)), params_(num_params) {}
  ~PgStatement() override {
    // A statement dropped while the connection lives (one prepared beside a busy cached one)
    // frees its server-side plan; at close the session's end frees them all.
    if (!name_.empty() && !conn_->closing() && generation_ == conn_->generation() &&
        PQstatus(conn_->raw()) == CONNECTION_OK &&
        PQtransactionStatus(conn_->raw()) != PQTRANS_INERROR) {
      Result r(PQexec(conn_->raw(), absl::StrCat("DEALLOCATE ", name_).c_str()));
    }
  }

  void BindText(int index, std::string_view text) override { Set(index, kByteaOid, text); }
  void BindBlob(int index, std::string_view bytes) override { Set(index, kByteaOid, bytes); }
  void BindInt64(int index, int64_t value) override {
    Set(index, kInt8Oid, BigEndian(static_cast<uint64_t>(value)));
  }
  void BindDouble(int index, double value) override {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    Set(index, kFloat8Oid, BigEndian(bits));
  }
  void BindNull(int index) override {
    if (!Check(index)) return;
    params_[index - 1] = Param{};
  }

  absl::StatusOr<bool> Step() override {
    if (!executed_) {
      if (!bind_status_.ok()) return bind_status_;
      if (absl::Status st = Execute(); !st.ok()) return st;
      executed_ = true;
      row_ = -1;
    }
    if (res_ == nullptr) return false;
    ++row_;
    return row_ < PQntuples(res_.get());
  }

  int64_t ColumnInt64(int col) const override {
    if (IsNull(col)) return 0;
    const char* v = PQgetvalue(res_.get(), row_, col);
    switch (PQftype(res_.get(), col)) {
      case kInt8Oid:
        return static_cast<int64_t>(ReadBigEndian(v, 8));
      case kInt4Oid:
        return static_cast<int32_t>(ReadBigEndian(v, 4));
      case kInt2Oid:
        return static_cast<int16_t>(ReadBigEndian(v, 2));
      case kBoolOid:
        return v[0] != 0;
      case kFloat8Oid:
      case kFloat4Oid:
        return static_cast<int64_t>(ColumnDouble(col));
      default:
        return 0;
    }
  }
  double ColumnDouble(int col) const override {
    if (IsNull(col)) return 0;
    const char* v = PQgetvalue(res_.get(), row_, col);
    switch (PQftype(res_.get(), col)) {
      case kFloat8Oid: {
        uint64_t bits = ReadBigEndian(v, 8);
        double d;
        std::memcpy(&d, &bits, 8);
        return d;
      }
      case kFloat4Oid: {
        uint32_t bits = static_cast<uint32_t>(ReadBigEndian(v, 4));
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
      }
      default:
        return static_cast<double>(ColumnInt64(col));
    }
  }
  std::string ColumnText(int col) const override { return ColumnBlob(col); }
  std::string ColumnBlob(int col) const override {
    if (IsNull(col)) return std::string();
    return std::string(PQgetvalue(res_.get(), row_, col),
                       static_cast<size_t>(PQgetlength(res_.get(), row_, col)));
  }
  bool ColumnIsNull(int col) const override { return IsNull(col); }

  void Reset() override {
    for (Param& p : params_) p = Param{};
    res_.reset();
    executed_ = false;
    bind_status_ = absl::OkStatus();
  }

 private:
  struct Param {
    Oid type = 0;  // 0: NULL
    std::string bytes;
  };

  bool Check(int index) {
    if (index >= 1 && index <= static_cast<int>(params_.size())) return true;
    if (bind_status_.ok()) {
      bind_status_ = absl::InternalError(
          absl::StrCat("database ", conn_->location(), ": bind parameter ", index, " of ",
                       params_.size(), " in '", sql_.substr(0, 40), "'"));
    }
    return false;
  }
  void Set(int index, Oid type, std::string_view bytes) {
    if (!Check(index)) return;
    params_[index - 1].type = type;
    params_[index - 1].bytes.assign(bytes.data() != nullptr ? bytes.data() : "", bytes.size());
  }
  bool IsNull(int col) const {
    return res_ == nullptr || row_ < 0 || row_ >= PQntuples(res_.get()) ||
           col >= PQnfields(res_.get()) || PQgetisnull(res_.get(), row_, col);
  }

  absl::Status Execute() {
    const bool in_transaction = conn_->InTransaction();
    absl::Status st = ExecuteOnce();
    if (!st.ok() && !in_transaction && session_lost_) {
      // Outside a transaction the statement found the session gone: once more in a new one.
      if (absl::Status again = conn_->EnsureSession(/*force=*/true); !again.ok()) return again;
      st = ExecuteOnce();
    }
    return st;
  }

  absl::Status ExecuteOnce() {
    session_lost_ = false;
    std::vector<Oid> types(params_.size());
    std::vector<const char*> values(params_.size());
    std::vector<int> lengths(params_.size());
    std::vector<int> formats(params_.size(), 1);
    for (size_t i = 0; i < params_.size(); ++i) {
      types[i] = params_[i].type;
      values[i] = params_[i].type == 0 ? nullptr : params_[i].bytes.data();
      lengths[i] = static_cast<int>(params_[i].bytes.size());
    }
    if (absl::Status st = conn_->EnsureSession(); !st.ok()) return st;
    bool retyped = generation_ != conn_->generation();
    for (size_t i = 0; i < types.size() && !name_.empty(); ++i) {
      retyped = retyped || (types[i] != 0 && types[i] != prepared_types_[i]);
    }
    if (name_.empty() || retyped) {
      std::string name = conn_->NextStatementName();
      Result prepared(PQprepare(conn_->raw(), name.c_str(), sql_.c_str(),
                                static_cast<int>(types.size()), types.data()));
      if (!Succeeded(prepared.get())) {
        session_lost_ = SessionLost(conn_->raw(), prepared.get());
        return conn_->Error(prepared.get(), absl::StrCat("prepare '", sql_.substr(0, 40), "'"));
      }
      name_ = std::move(name);
      prepared_types_ = types;
      generation_ = conn_->generation();
    }
    res_.reset(PQexecPrepared(conn_->raw(), name_.c_str(), static_cast<int>(values.size()),
                              values.data(), lengths.data(), formats.data(), /*resultFormat=*/1));
    if (!Succeeded(res_.get())) {
      absl::Status st = conn_->Error(res_.get(), absl::StrCat("run '", sql_.substr(0, 40), "'"));
      session_lost_ = SessionLost(conn_->raw(), res_.get());
      res_.reset();
      return st;
    }
    return absl::OkStatus();
  }

  PgConnection* conn_;
  std::string sql_;
  std::string name_;  // empty until prepared on the server
  std::vector<Oid> prepared_types_;
  uint64_t generation_ = 0;  // of the session it was prepared in
  std::vector<Param> params_;
  Result res_;
  int row_ = -1;
  bool executed_ = false;
  bool session_lost_ = false;  // the last execution failed for want of a session
  absl::Status bind_status_;
};

void IgnoreNotice(void*, const char*) {}

// The code of a status for SQLSTATE `state` (PostgreSQL's errcodes.txt, by class).
absl::StatusCode CodeOf(std::string_view state) {
  if (state == "40001" || state == "40P01") return absl::StatusCode::kAborted;
  if (state == "55P03" || state == "57014" || state == "57P01" || state == "57P02" ||
      state == "57P03") {
    return absl::StatusCode::kUnavailable;
  }
  if (state == "3D000") return absl::StatusCode::kNotFound;
  if (state == "42501") return absl::StatusCode::kPermissionDenied;
  if (state == "XX001" || state == "XX002") return absl::StatusCode::kDataLoss;
  std::string_view cls = state.substr(0, 2);
  if (cls == "08") return absl::StatusCode::kUnavailable;
  if (cls == "28") return absl::StatusCode::kPermissionDenied;
  if (cls == "53" || cls == "54") return absl::StatusCode::kResourceExhausted;
  if (cls == "23") return absl::StatusCode::kFailedPrecondition;
  if (cls == "22") return absl::StatusCode::kInvalidArgument;
  return absl::StatusCode::kInternal;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgConnection>> PgConnection::Connect(const std::string& url,
                                                                    const std::string& display,
                                                                    int lock_timeout_ms) {
  // Defaults first: the URL's own parameters override them (expand_dbname).
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "lathe", url.c_str(), nullptr};
  PGconn* raw = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (raw == nullptr) return absl::ResourceExhaustedError("libpq: out of memory");
  std::unique_ptr<PgConnection> conn(new PgConnection(raw, display, lock_timeout_ms));
  if (PQstatus(raw) != CONNECTION_OK) {
    std::string detail(absl::StripAsciiWhitespace(PQerrorMessage(raw)));
    std::string msg = absl::StrCat("database ", display, ": cannot connect: ", detail);
    if (absl::StrContains(detail, "does not exist")) return absl::NotFoundError(msg);
    if (absl::StrContains(detail, "authentication") || absl::StrContains(detail, "password")) {
      return absl::PermissionDeniedError(msg);
    }
    if (absl::StrContains(detail, "invalid") || absl::StrContains(detail, "missing")) {
      return absl::InvalidArgumentError(msg);
    }
    return absl::UnavailableError(msg);
  }
  PQsetNoticeProcessor(raw, IgnoreNotice, nullptr);
  if (absl::Status st = conn->SetUpSession(); !st.ok()) return st;
  return conn;
}

absl::Status PgConnection::SetUpSession() {
  if (absl::Status st = Exec(absl::StrCat("SET lock_timeout = ", lock_timeout_ms_,
                                          "; SET client_min_messages = warning"),
                             "configure session");
      !st.ok()) {
    return st;
  }
  // Results are acknowledged only after a durable commit.
  absl::StatusOr<std::string> sync = QueryText("SELECT current_setting('synchronous_commit')");
  if (!sync.ok()) return sync.status();
  if (*sync == "off") return Exec("SET synchronous_commit = on", "configure session");
  return absl::OkStatus();
}

absl::Status PgConnection::EnsureSession(bool force) {
  if (!force && PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  if (in_transaction_) {
    return absl::UnavailableError(
        absl::StrCat("database ", location(), ": the connection was lost in a transaction"));
  }
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) {
    return absl::UnavailableError(absl::StrCat(
        "database ", location(),
        ": reconnect: ", std::string(absl::StripAsciiWhitespace(PQerrorMessage(conn_)))));
  }
  ++generation_;
  if (absl::Status st = SetUpSession(); !st.ok()) return st;
  std::vector<std::string> claimed;
  claimed.swap(claimed_);
  for (const std::string& uid : claimed) {
    // A job another daemon took while this session was away stays with it (best effort:
    // this daemon's runner keeps going; the records stay idempotent by candidate id).
    (void)ClaimJob(uid);
  }
  return absl::OkStatus();
}

PgConnection::~PgConnection() {
  closing_ = true;
  ClearCache();
  PQfinish(conn_);
}

absl::Status PgConnection::Error(const pg_result* res, std::string_view what) const {
  std::string detail;
  const char* state = nullptr;
  if (res != nullptr) {
    detail = PQresultErrorMessage(res);
    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  }
  if (detail.empty()) detail = PQerrorMessage(conn_);
  detail = std::string(absl::StripAsciiWhitespace(detail));
  std::string msg = absl::StrCat("database ", location(), ": ", std::string(what), ": ", detail);
  if (state == nullptr) {
    // No SQLSTATE: the connection itself failed.
    return absl::UnavailableError(msg);
  }
  return absl::Status(CodeOf(state), msg);
}

absl::Status PgConnection::Exec(std::string_view sql, std::string_view what) {
  const bool ends = sql == "COMMIT" || sql == "ROLLBACK";
  if (ends && PQstatus(conn_) != CONNECTION_OK) {
    // The session (and its transaction) is gone: nothing to end; a COMMIT did not happen.
    in_transaction_ = false;
    return sql == "ROLLBACK" ? absl::OkStatus() : Error(nullptr, what);
  }
  if (absl::Status st = EnsureSession(); !st.ok()) return st;
  const bool in_transaction = in_transaction_;
  Result res(PQexec(conn_, std::string(sql).c_str()));
  if (!in_transaction && SessionLost(conn_, res.get())) {
    // The session was found gone by this statement, outside a transaction: once more in a new
    // one.
    if (absl::Status st = EnsureSession(/*force=*/true); !st.ok()) return st;
    res.reset(PQexec(conn_, std::string(sql).c_str()));
  }
  if (ends) in_transaction_ = false;
  if (!Succeeded(res.get())) return Error(res.get(), what);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StatementImpl>> PgConnection::PrepareNew(std::string_view sql) {
  int count = 0;
  std::string numbered = NumberPlaceholders(sql, &count);
  return std::make_unique<PgStatement>(this, std::move(numbered), count);
}

absl::Status PgConnection::BeginWrite() {
  absl::Status st = Exec("BEGIN", "begin write transaction");
  in_transaction_ = st.ok();
  return st;
}

absl::Status PgConnection::BeginRead() {
  absl::Status st =
      Exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin read transaction");
  in_transaction_ = st.ok();
  return st;
}

absl::Status PgConnection::CommitTransaction() {
  in_transaction_ = false;
  Result res(PQexec(conn_, "COMMIT"));
  if (!Succeeded(res.get())) return Error(res.get(), "commit");
  // COMMIT of a transaction that failed earlier succeeds as a ROLLBACK.
  if (std::string_view(PQcmdStatus(res.get())) == "ROLLBACK") {
    return absl::AbortedError(
        absl::StrCat("database ", location(), ": commit: the transaction was rolled back"));
  }
  return absl::OkStatus();
}

bool PgConnection::InTransaction() const {
  return in_transaction_ ||
         (PQstatus(conn_) == CONNECTION_OK && PQtransactionStatus(conn_) != PQTRANS_IDLE);
}

absl::StatusOr<int64_t> PgConnection::SchemaVersion() {
  absl::StatusOr<int64_t> exists =
      QueryInt64("SELECT CAST(to_regclass('lathe_schema') IS NOT NULL AS INTEGER)");
  if (!exists.ok()) return exists.status();
  if (*exists == 0) return int64_t{0};
  return QueryInt64("SELECT COALESCE(max(version), 0) FROM lathe_schema");
}

absl::StatusOr<std::vector<std::string>> PgConnection::IntegrityCheck() {
  // The server keeps its own files consistent (WAL, checksums when enabled); this checks what
  // lathe's constraints do not: error classes and the size of the repeats blobs.
  std::vector<std::string> problems;
  absl::StatusOr<int64_t> bad_repeats =
      QueryInt64("SELECT count(*) FROM records WHERE length(repeats) % 8 <> 0");
  if (!bad_repeats.ok()) return bad_repeats.status();
  if (*bad_repeats > 0) {
    problems.push_back(absl::StrCat(*bad_repeats, " records with a partial repeat"));
  }
  absl::StatusOr<int64_t> bad_class = QueryInt64(
      "SELECT count(*) FROM records WHERE error_class NOT IN ('ok', 'invalid_schedule', "
      "'compile_error', 'runtime_error', 'timeout', 'wrong_answer')");
  if (!bad_class.ok()) return bad_class.status();
  if (*bad_class > 0) {
    problems.push_back(absl::StrCat(*bad_class, " records with an unknown error class"));
  }
  return problems;
}

namespace {
// The 64-bit advisory lock key of a job uid (its md5's first 8 bytes).
constexpr char kJobLockKey[] = "CAST(CAST('x' || substr(md5(?), 1, 16) AS bit(64)) AS bigint)";
}  // namespace

absl::StatusOr<bool> PgConnection::ClaimJob(const std::string& uid) {
  absl::StatusOr<Statement> stmt =
      Prepare(absl::StrCat("SELECT CAST(pg_try_advisory_lock(", kJobLockKey, ") AS INTEGER)"));
  if (!stmt.ok()) return stmt.status();
  stmt->BindBlob(1, uid);
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  const bool claimed = *row && stmt->ColumnInt64(0) != 0;
  if (claimed) claimed_.push_back(uid);
  return claimed;
}

absl::Status PgConnection::ReleaseJob(const std::string& uid) {
  absl::StatusOr<Statement> stmt =
      Prepare(absl::StrCat("SELECT CAST(pg_advisory_unlock(", kJobLockKey, ") AS INTEGER)"));
  if (!stmt.ok()) return stmt.status();
  stmt->BindBlob(1, uid);
  std::erase(claimed_, uid);
  return stmt->Run();
}

// ---------------------------------------------------------------------------- schema

namespace {

// Schema version 4 (the SQLite file's kSchemaVersion) in one step: PostgreSQL stores began
// there. Text columns are BYTEA (byte-exact, like SQLite's TEXT); later versions add
// migrations after this one.
constexpr char kPgSchemaV4[] = R"sql(
CREATE TABLE lathe_schema(version BIGINT NOT NULL);
CREATE TABLE workloads(
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  key BYTEA NOT NULL UNIQUE,
  spec BYTEA NOT NULL
);
CREATE TABLE device_classes(
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name BYTEA NOT NULL UNIQUE
);
CREATE TABLE records(
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  candidate_id BYTEA NOT NULL UNIQUE,
  workload_id BIGINT NOT NULL REFERENCES workloads(id),
  device_class_id BIGINT NOT NULL REFERENCES device_classes(id),
  trace_json BYTEA NOT NULL,
  repeats BYTEA NOT NULL,
  median_us DOUBLE PRECISION NOT NULL,
  error_class BYTEA NOT NULL,
  error_msg BYTEA NOT NULL DEFAULT ''::bytea,
  worker BYTEA NOT NULL DEFAULT ''::bytea,
  measured_at BIGINT NOT NULL,
  cv DOUBLE PRECISION NOT NULL DEFAULT 0,
  flops DOUBLE PRECISION NOT NULL DEFAULT 0,
  lathe_version BYTEA NOT NULL DEFAULT ''::bytea,
  inserted_at BIGINT NOT NULL DEFAULT 0,
  remeasured_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX records_best ON records(workload_id, device_class_id, error_class, median_us);
CREATE TABLE cost_models(
  device_class_id BIGINT PRIMARY KEY REFERENCES device_classes(id),
  format BYTEA NOT NULL,
  model BYTEA NOT NULL,
  trained_on BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE TABLE jobs(
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  uid BYTEA NOT NULL UNIQUE,
  spec_json BYTEA NOT NULL,
  device_class BYTEA NOT NULL,
  state BYTEA NOT NULL,
  trials_requested BIGINT NOT NULL,
  trials_done BIGINT NOT NULL DEFAULT 0,
  error_msg BYTEA NOT NULL DEFAULT ''::bytea,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX jobs_by_state ON jobs(state, id);
CREATE TABLE features(
  candidate_id BYTEA PRIMARY KEY,
  version BIGINT NOT NULL,
  num_rows BIGINT NOT NULL,
  num_cols BIGINT NOT NULL,
  data BYTEA NOT NULL
);
)sql";

// Tables of lathe's schema; a database holding one of them without lathe_schema is not
// lathe's.
constexpr const char* kLatheTables[] = {"workloads",   "device_classes", "records",
                                        "cost_models", "jobs",           "features"};

}  // namespace

namespace {

absl::Status Newer(const PgConnection& conn, int64_t version) {
  return absl::FailedPreconditionError(
      absl::StrCat("database ", conn.location(), ": schema version ", version,
                   " is newer than this lathe supports (", kSchemaVersion,
                   "); use a newer lathe (the database was not modified)"));
}

// Creates or checks the schema; the caller holds the schema lock.
absl::Status MigrateLocked(PgConnection& conn) {
  absl::StatusOr<Transaction> txn = Transaction::BeginImmediate(conn);
  if (!txn.ok()) return txn.status();
  absl::StatusOr<int64_t> version = conn.SchemaVersion();
  if (!version.ok()) return version.status();
  if (*version > kSchemaVersion) return Newer(conn, *version);
  if (*version == kSchemaVersion) return txn->Commit();
  if (*version == 0) {
    for (const char* table : kLatheTables) {
      absl::StatusOr<int64_t> found = conn.QueryInt64(
          absl::StrCat("SELECT CAST(to_regclass('", table, "') IS NOT NULL AS INTEGER)"));
      if (!found.ok()) return found.status();
      if (*found != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "database ", conn.location(), ": not a lathe database (it has a table '", table,
            "' but no lathe schema; give lathe its own database or schema; the database was not "
            "modified)"));
      }
    }
    if (absl::Status st = conn.Exec(kPgSchemaV4, "create the schema"); !st.ok()) return st;
    if (absl::Status st = conn.Exec(
            absl::StrCat("INSERT INTO lathe_schema(version) VALUES(", kSchemaVersion, ")"),
            "set schema version");
        !st.ok()) {
      return st;
    }
  }
  return txn->Commit();
}

}  // namespace

absl::Status MigratePostgres(PgConnection& conn, const OpenOptions& options) {
  // Fast path: an up-to-date schema needs no lock.
  absl::StatusOr<int64_t> seen = conn.SchemaVersion();
  if (!seen.ok()) return seen.status();
  if (*seen == kSchemaVersion) return absl::OkStatus();
  if (*seen > kSchemaVersion) return Newer(conn, *seen);
  if (*seen == 0 && !options.create_if_missing) {
    return absl::NotFoundError(
        absl::StrCat("database ", conn.location(), ": no lathe schema in this database"));
  }
  // Daemons starting at once wait here for each other; the first creates the schema, the others
  // then find it made. The lock is the session's, taken before the transaction begins: a
  // transaction that began before the wait would look the tables up in the catalog caches of
  // its start and miss those created meanwhile.
  if (absl::Status st = conn.Exec(absl::StrCat("SELECT pg_advisory_lock(", kSchemaLockKey, ")"),
                                  "lock the schema");
      !st.ok()) {
    return st;
  }
  absl::Status migrated = MigrateLocked(conn);
  absl::Status unlocked = conn.Exec(absl::StrCat("SELECT pg_advisory_unlock(", kSchemaLockKey, ")"),
                                    "unlock the schema");
  if (!migrated.ok()) return migrated;
  return unlocked;
}

}  // namespace lathe::db::internal
