// \file
// Tests that run against both stores: a fixture parameterized by the store, which gives each
// test a fresh location (a SQLite file in a temporary directory, or a new database on the
// test process's PostgreSQL server, pg_server.h) and skips, saying why, when PostgreSQL
// cannot be started here.
#ifndef LATHE_TESTS_DB_STORE_PARAM_H_
#define LATHE_TESTS_DB_STORE_PARAM_H_

#include <gtest/gtest.h>

#include <string>

#include "tests/db/pg_server.h"
#include "tests/db/test_util.h"

namespace lathe::db::testing {

enum class Store { kSqlite, kPostgres };

inline std::string StoreName(const ::testing::TestParamInfo<Store>& info) {
  return info.param == Store::kSqlite ? "Sqlite" : "Postgres";
}

class StoreTest : public ::testing::TestWithParam<Store> {
 protected:
  void SetUp() override {
    if (GetParam() == Store::kSqlite) {
      location_ = dir_.File("t.db");
      return;
    }
    absl::StatusOr<PgServer*> server = PgServer::Get();
    if (!server.ok()) GTEST_SKIP() << "no PostgreSQL server: " << server.status().message();
    absl::StatusOr<std::string> url = (*server)->NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    location_ = *url;
  }

  // Where the test's database lives: a file path or a postgresql:// URL.
  const std::string& Location() const { return location_; }
  bool IsPostgres() const { return GetParam() == Store::kPostgres; }

  TempDir dir_;

 private:
  std::string location_;
};

#define LATHE_INSTANTIATE_STORE_TEST(suite)                                           \
  INSTANTIATE_TEST_SUITE_P(Stores, suite,                                             \
                           ::testing::Values(::lathe::db::testing::Store::kSqlite,    \
                                             ::lathe::db::testing::Store::kPostgres), \
                           ::lathe::db::testing::StoreName)

}  // namespace lathe::db::testing

#endif  // LATHE_TESTS_DB_STORE_PARAM_H_
