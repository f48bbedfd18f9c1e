// Opening files that are not (healthy, current) lathe databases: refused with a clear
// message and left byte-for-byte untouched; older schemas migrated without losing a record.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "db/database.h"
#include "db/jsonl.h"
#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::MakeRecord;
using testing::ReadBytes;
using testing::TempDir;
using testing::WriteBytes;

constexpr char kCpu[] = "cpu:Test CPU:avx2:8c";

// Runs SQL on a file with the plain SQLite API (no lathe code involved).
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

// A healthy lathe database with `n` records, closed, in rollback-journal mode when asked.
void MakeDatabase(const std::string& path, int n, bool wal = true) {
  {
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
    ASSERT_TRUE(db.ok()) << db.status();
    std::vector<Record> batch;
    for (int i = 0; i < n; ++i) {
      Record r = MakeRecord("cand-" + std::to_string(i), std::to_string(i % 7), kCpu, 1 + i);
      r.error_msg = std::string(200, 'x');  // spread the records over many pages
      batch.push_back(r);
    }
    ASSERT_TRUE((*db)->InsertBatch(batch).ok());
  }
  if (!wal) RawExec(path, "PRAGMA journal_mode = DELETE;");
}

void ExpectRefusedUntouched(const std::string& path, const OpenOptions& options,
                            absl::StatusCode code, const std::string& fragment) {
  std::string before = ReadBytes(path);
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path, options);
  ASSERT_FALSE(db.ok()) << "opened " << path;
  EXPECT_EQ(db.status().code(), code) << db.status();
  EXPECT_NE(db.status().message().find(fragment), std::string::npos) << db.status();
  EXPECT_NE(db.status().message().find(path), std::string::npos) << db.status();
  EXPECT_EQ(ReadBytes(path), before) << "file was modified";
}

TEST(OpenTest, TextFileIsNotADatabase) {
  TempDir dir;
  std::string path = dir.File("notes.txt");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "this is a text file, line " + std::to_string(i) + "\n";
  WriteBytes(path, text);
  ExpectRefusedUntouched(path, {}, absl::StatusCode::kDataLoss, "file is not a database");
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  // A short file too.
  WriteBytes(path, "hello");
  ExpectRefusedUntouched(path, {}, absl::StatusCode::kDataLoss, "file is not a database");
}

TEST(OpenTest, BadHeaderFieldsAreRefused) {
  TempDir dir;
  std::string path = dir.File("t.db");
  MakeDatabase(path, 10);
  std::string bytes = ReadBytes(path);
  bytes[16] = 0x01;  // page size 0x01xx: not a power of two
  bytes[17] = 0x23;
  WriteBytes(path, bytes);
  ExpectRefusedUntouched(path, {}, absl::StatusCode::kDataLoss, "not a database");
}

// Overwrites a b-tree page in the middle of the file with garbage.
void CorruptMiddlePage(const std::string& path) {
  std::string bytes = ReadBytes(path);
  size_t page =
      (static_cast<unsigned char>(bytes[16]) << 8) | static_cast<unsigned char>(bytes[17]);
  if (page == 1) page = 65536;
  size_t pages = bytes.size() / page;
  ASSERT_GT(pages, 8u);
  size_t target = pages / 2;
  for (size_t i = 0; i < page; ++i) bytes[target * page + i] = static_cast<char>(0xa5 ^ (i * 7));
  WriteBytes(path, bytes);
}

TEST(OpenTest, CorruptDatabaseIsRefusedBeforeWalSwitch) {
  TempDir dir;
  std::string path = dir.File("t.db");
  MakeDatabase(path, 2000, /*wal=*/false);
  CorruptMiddlePage(path);
  ExpectRefusedUntouched(path, {}, absl::StatusCode::kDataLoss, "corrupt");
}

TEST(OpenTest, CorruptWalDatabaseIsRefusedWithQuickCheck) {
  TempDir dir;
  std::string path = dir.File("t.db");
  MakeDatabase(path, 2000);
  CorruptMiddlePage(path);
  OpenOptions options;
  options.quick_check = true;
  ExpectRefusedUntouched(path, options, absl::StatusCode::kDataLoss, "corrupt");
  // Without the check it opens, and the full integrity check reports the damage.
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  absl::StatusOr<std::vector<std::string>> problems = (*db)->IntegrityCheck();
  EXPECT_TRUE(!problems.ok() || !problems->empty());
}

TEST(OpenTest, NewerSchemaIsRefused) {
  TempDir dir;
  std::string path = dir.File("t.db");
  MakeDatabase(path, 5);
  RawExec(path, "PRAGMA user_version = 99;");
  ExpectRefusedUntouched(path, {}, absl::StatusCode::kFailedPrecondition,
                         "schema version 99 is newer than this lathe supports");
}

TEST(OpenTest, ForeignSqliteDatabaseIsRefused) {
  TempDir dir;
  std::string path = dir.File("other.db");
  RawExec(path,
          "CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT); "
          "INSERT INTO photos(name) VALUES('cat');");
  ExpectRefusedUntouched(path, {}, absl::StatusCode::kFailedPrecondition, "not a lathe database");
}

TEST(OpenTest, MissingFileAndDirectory) {
  TempDir dir;
  OpenOptions no_create;
  no_create.create_if_missing = false;
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(dir.File("none.db"), no_create);
  EXPECT_EQ(db.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir.File("none.db")));
  db = Database::Open(dir.path());
  EXPECT_FALSE(db.ok());
  db = Database::Open(dir.File("no/such/dir/x.db"));
  EXPECT_FALSE(db.ok());
  // An empty file is a new database.
  WriteBytes(dir.File("empty.db"), "");
  db = Database::Open(dir.File("empty.db"));
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ(*(*db)->SchemaVersion(), kSchemaVersion);
}

// The v1 schema exactly as lathe 0.1 wrote it (frozen here, independent of the library).
constexpr char kV1Schema[] = R"sql(
CREATE TABLE workloads(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, spec TEXT NOT NULL);
CREATE TABLE device_classes(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
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
PRAGMA user_version = 1;
)sql";

std::string RepeatsBlobSql(const std::vector<double>& v) {
  // Little-endian float64 as an SQL blob literal.
  std::string hex = "X'";
  for (double d : v) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    for (int b = 0; b < 8; ++b) {
      char buf[3];
      std::snprintf(buf, sizeof(buf), "%02X", static_cast<unsigned>((bits >> (8 * b)) & 0xff));
      hex += buf;
    }
  }
  return hex + "'";
}

TEST(MigrationTest, V1DatabaseKeepsEveryRecord) {
  TempDir dir;
  std::string path = dir.File("v1.db");
  constexpr int kRecords = 500;
  std::string sql = kV1Schema;
  sql += "BEGIN;";
  sql += "INSERT INTO workloads(id, key, spec) VALUES(1, 'key-a', 'matmul:k=8,m=8,n=8');";
  sql += "INSERT INTO workloads(id, key, spec) VALUES(2, 'key-b', 'softmax:m=4,n=4');";
  sql += "INSERT INTO device_classes(id, name) VALUES(1, 'cpu:Old CPU:avx2:4c');";
  const char* classes[] = {"ok", "ok", "ok", "timeout", "compile_error"};
  for (int i = 0; i < kRecords; ++i) {
    std::vector<double> repeats = {10.0 + i, 11.0 + i, 12.0 + i};
    const char* ec = classes[i % 5];
    sql +=
        "INSERT INTO records(candidate_id, workload_id, device_class_id, trace_json, repeats, "
        "median_us, error_class, error_msg, worker, measured_at) VALUES('v1-" +
        std::to_string(i) + "', " + std::to_string(1 + i % 2) +
        ", 1, '{\"i\":" + std::to_string(i) + "}', " + RepeatsBlobSql(repeats) + ", " +
        std::to_string(11.0 + i) + ", '" + ec + "', 'it''s ok', 'old-worker', " +
        std::to_string(1600000000000LL + i) + ");";
  }
  sql += "COMMIT;";
  RawExec(path, sql);

  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ(*(*db)->SchemaVersion(), kSchemaVersion);
  absl::StatusOr<Stats> stats = (*db)->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->records, kRecords);
  EXPECT_EQ(stats->ok_records, kRecords * 3 / 5);
  EXPECT_EQ(stats->workloads, 2);

  int seen = 0;
  absl::Status st = (*db)->ForEachRecord([&](const Record& r) {
    int i = std::stoi(r.candidate_id.substr(3));
    EXPECT_EQ(r.workload_key, i % 2 == 0 ? "key-a" : "key-b");
    EXPECT_EQ(r.trace_json, "{\"i\":" + std::to_string(i) + "}");
    EXPECT_EQ(r.repeats_us, (std::vector<double>{10.0 + i, 11.0 + i, 12.0 + i}));
    EXPECT_EQ(r.median_us, 11.0 + i);
    EXPECT_NEAR(r.cv, CoefficientOfVariation(r.repeats_us), 1e-12);
    EXPECT_EQ(r.error_msg, "it's ok");
    EXPECT_EQ(r.worker, "old-worker");
    EXPECT_EQ(r.lathe_version, "");
    EXPECT_EQ(r.measured_at_ms, 1600000000000LL + i);
    EXPECT_EQ(r.inserted_at_ms, r.measured_at_ms);
    ++seen;
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(seen, kRecords);

  absl::StatusOr<std::optional<Record>> best = (*db)->Best("key-a", "cpu:Old CPU:avx2:4c");
  ASSERT_TRUE(best.ok() && best->has_value());
  EXPECT_EQ((*best)->candidate_id, "v1-0");
  // The migrated file takes new records, and reopening does not migrate again.
  ASSERT_TRUE((*db)->Insert(MakeRecord("new", "x", "cpu:Old CPU:avx2:4c", 1)).ok());
  db->reset();
  db = Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ((*db)->GetStats()->records, kRecords + 1);
  EXPECT_TRUE((*db)->IntegrityCheck()->empty());
}

}  // namespace
}  // namespace lathe::db
