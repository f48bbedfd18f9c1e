// `--db` locations (a SQLite path or a PostgreSQL URL, never a URL taken for a path) and what
// only the PostgreSQL store does: schema creation by processes that start at once, refusal of
// databases that are not lathe's or are newer, connection failures.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/location.h"
#include "tests/db/pg_server.h"
#include "tests/db/test_util.h"

namespace lathe::db {
namespace {

using testing::MakeRecord;
using testing::PgServer;
using testing::TempDir;

constexpr char kCpu[] = "cpu:Test CPU:avx512:2c";

TEST(LocationTest, PathsAndUrls) {
  absl::StatusOr<DatabaseLocation> loc = ParseDatabaseLocation("/var/lib/lathe/tuning.db");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->kind, StoreKind::kSqlite);
  EXPECT_EQ(loc->target, "/var/lib/lathe/tuning.db");
  // A colon is a file name's business; only scheme:// makes a URL.
  for (const char* path : {"tuning.db", "a:b.db", "postgresql:x.db", "./postgresql://x", "c:/x"}) {
    loc = ParseDatabaseLocation(path);
    ASSERT_TRUE(loc.ok()) << path;
    EXPECT_EQ(loc->kind, StoreKind::kSqlite) << path;
  }
  for (const char* url : {"postgresql://u@db.example.org:5432/lathe", "postgres://localhost/x",
                          "PostgreSQL://h/x", "postgresql:///lathe?host=/run/postgresql"}) {
    loc = ParseDatabaseLocation(url);
    ASSERT_TRUE(loc.ok()) << url << ": " << loc.status();
    EXPECT_EQ(loc->kind, StoreKind::kPostgres) << url;
    EXPECT_TRUE(loc->target.rfind("postgres", 0) == 0) << loc->target;
    EXPECT_TRUE(IsDatabaseUrl(url));
  }
  EXPECT_TRUE(absl::IsInvalidArgument(ParseDatabaseLocation("").status()));
}

TEST(LocationTest, UnknownSchemeIsAnErrorNamingIt) {
  for (const char* url : {"foo://x", "mysql://db/lathe", "sqlite:///tmp/x.db", "http://h/"}) {
    absl::StatusOr<DatabaseLocation> loc = ParseDatabaseLocation(url);
    ASSERT_TRUE(absl::IsInvalidArgument(loc.status())) << url << ": " << loc.status();
    std::string scheme = std::string(url).substr(0, std::string(url).find(':'));
    EXPECT_NE(loc.status().message().find("'" + scheme + "'"), std::string::npos) << loc.status();
  }
}

TEST(LocationTest, PasswordsAreRedacted) {
  EXPECT_EQ(RedactDatabaseLocation("postgresql://lathe:s3cret@db:5432/t"),
            "postgresql://lathe:***@db:5432/t");
  EXPECT_EQ(RedactDatabaseLocation("postgresql://db/t?user=u&password=s3cret&sslmode=require"),
            "postgresql://db/t?user=u&password=***&sslmode=require");
  EXPECT_EQ(RedactDatabaseLocation("postgresql://lathe@db/t"), "postgresql://lathe@db/t");
  EXPECT_EQ(RedactDatabaseLocation("/tmp/a:b@c.db"), "/tmp/a:b@c.db");
}

// The bug this replaces: a URL opened as a file created a directory named "postgresql:".
TEST(LocationTest, OpenNeverTakesAUrlForAPath) {
  TempDir dir;
  std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open("foo://x/y.db");
  EXPECT_TRUE(absl::IsInvalidArgument(db.status())) << db.status();
  EXPECT_NE(db.status().message().find("'foo'"), std::string::npos) << db.status();
  // Nothing listens on this socket directory: the server is unreachable, not a file.
  db = Database::Open("postgresql:///lathe?host=" + dir.path() + "&connect_timeout=2");
  EXPECT_TRUE(absl::IsUnavailable(db.status())) << db.status();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  std::filesystem::current_path(cwd);
}

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<PgServer*> server = PgServer::Get();
    if (!server.ok()) GTEST_SKIP() << "no PostgreSQL server: " << server.status().message();
    server_ = *server;
    absl::StatusOr<std::string> url = server_->NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  PgServer* server_ = nullptr;
  std::string url_;
};

// Processes that open one new database at once create its schema once, and every one of
// them can write afterwards.
TEST_F(PostgresTest, ConcurrentSchemaCreationByProcesses) {
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<std::string> url = server_->NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    constexpr int kProcs = 4;
    std::vector<pid_t> pids;
    for (int p = 0; p < kProcs; ++p) {
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(*url);
        if (!db.ok()) {
          std::fprintf(stderr, "process %d: %s\n", p, db.status().ToString().c_str());
          ::_exit(1);
        }
        bool ok = (*db)->Insert(MakeRecord("p" + std::to_string(p), "1", kCpu, 10 + p)).ok();
        ::_exit(ok ? 0 : 2);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(*url);
    ASSERT_TRUE(db.ok()) << db.status();
    EXPECT_EQ(*(*db)->SchemaVersion(), kSchemaVersion);
    EXPECT_EQ((*db)->GetStats()->records, kProcs);
    EXPECT_EQ((*(*db)->Best("key-1", kCpu))->candidate_id, "p0");
  }
}

TEST_F(PostgresTest, ForeignOrNewerDatabasesAreRefusedUntouched) {
  absl::StatusOr<std::string> other = server_->NewDatabase();
  ASSERT_TRUE(other.ok());
  std::string name = other->substr(std::string("postgresql:///").size());
  name.resize(name.find('?'));
  ASSERT_TRUE(server_->Sql("CREATE TABLE records(x int)", name).ok());
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(*other);
  EXPECT_TRUE(absl::IsFailedPrecondition(db.status())) << db.status();
  EXPECT_NE(db.status().message().find("not a lathe database"), std::string::npos);

  db = Database::Open(url_);
  ASSERT_TRUE(db.ok()) << db.status();
  db->reset();
  std::string mine = url_.substr(std::string("postgresql:///").size());
  mine.resize(mine.find('?'));
  ASSERT_TRUE(server_->Sql("UPDATE lathe_schema SET version = 99", mine).ok());
  db = Database::Open(url_);
  EXPECT_TRUE(absl::IsFailedPrecondition(db.status())) << db.status();
  EXPECT_NE(db.status().message().find("newer"), std::string::npos) << db.status();
}

TEST_F(PostgresTest, MissingDatabaseOrSchema) {
  OpenOptions no_create;
  no_create.create_if_missing = false;
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(url_, no_create);
  EXPECT_TRUE(absl::IsNotFound(db.status())) << db.status();
  db = Database::Open(server_->Url("no_such_database"));
  EXPECT_TRUE(absl::IsNotFound(db.status())) << db.status();
  db = Database::Open(url_);
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ((*db)->path().find("password"), std::string::npos);
  db = Database::Open(url_, no_create);
  EXPECT_TRUE(db.ok()) << db.status();
}

// A daemon's connection outlives a restart of the server: the next call opens a new session,
// prepares its statements again and claims its jobs again.
TEST_F(PostgresTest, ReconnectsAfterTheServerRestarts) {
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(url_);
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_TRUE((*db)->Insert(MakeRecord("r1", "1", kCpu, 10)).ok());
  ASSERT_TRUE(*(*db)->ClaimJob("job-1"));
  absl::Status restarted = server_->Restart();
  if (!restarted.ok()) GTEST_SKIP() << restarted.message();
  absl::StatusOr<InsertResult> r2 = (*db)->Insert(MakeRecord("r2", "1", kCpu, 5));
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ((*(*db)->Best("key-1", kCpu))->candidate_id, "r2");
  EXPECT_EQ((*db)->GetStats()->records, 2);
  absl::StatusOr<std::unique_ptr<Database>> other = Database::Open(url_);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(*(*other)->ClaimJob("job-1"));
}

}  // namespace
}  // namespace lathe::db
