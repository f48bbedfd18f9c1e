// The `lathe query` and `lathe db` command functions (tools/cli_db.h): exit statuses and
// JSON fields of CONTRACT.md, on a real database file.

#include "tools/cli_db.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "codegen/host.h"
#include "db/database.h"
#include "ir/workload.h"
#include "tests/db/test_util.h"

namespace lathe::tools {
namespace {

using db::testing::TempDir;
using json = nlohmann::json;

struct Captured {
  int code;
  std::string out;
  std::string err;
};

template <typename F>
Captured Capture(F f) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = f();
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
  return {code, out, err};
}

constexpr char kSpec[] = "matmul:m=64,n=32,k=16";

void InsertBest(const std::string& path, const std::string& device_class) {
  absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::unique_ptr<db::Database>> database = db::Database::Open(path);
  ASSERT_TRUE(database.ok()) << database.status();
  for (int i = 0; i < 3; ++i) {
    db::Record r;
    r.candidate_id = "cand-" + std::to_string(i);
    r.workload = spec->ToString();
    r.workload_key = ir::WorkloadKey(r.workload);
    r.device_class = device_class;
    r.trace_json = "{\"instructions\":[],\"i\":" + std::to_string(i) + "}";
    r.repeats_us = {10.0 + i, 10.0 + i, 10.0 + i};
    r.worker = "w" + std::to_string(i);
    r.measured_at_ms = 1700000000000;
    ASSERT_TRUE((*database)->Insert(r).ok());
  }
}

TEST(CliDbTest, QueryExitStatusesAndJson) {
  TempDir dir;
  std::string path = dir.File("sub/tuning.db");
  QueryOptions q;
  q.workload = kSpec;
  q.db_path = path;
  q.json = true;
  Captured c = Capture([&] { return RunQuery(q); });
  EXPECT_EQ(c.code, 3) << c.err;
  EXPECT_NE(c.err.find("no record"), std::string::npos) << c.err;
  EXPECT_FALSE(std::filesystem::exists(path));  // a query writes nothing

  QueryOptions bad = q;
  bad.workload = "matmul:m=64";
  EXPECT_EQ(Capture([&] { return RunQuery(bad); }).code, 2);
  bad = q;
  bad.target = "tpu";
  EXPECT_EQ(Capture([&] { return RunQuery(bad); }).code, 2);

  std::filesystem::create_directories(dir.File("sub"));
  InsertBest(path, codegen::HostDeviceClass());
  c = Capture([&] { return RunQuery(q); });
  ASSERT_EQ(c.code, 0) << c.err;
  json j = json::parse(c.out);
  EXPECT_EQ(j["workload"], ir::ParseWorkloadSpec(kSpec)->ToString());
  EXPECT_EQ(j["device_class"], codegen::HostDeviceClass());
  EXPECT_EQ(j["latency_us"], 10.0);
  EXPECT_NEAR(j["gflops"].get<double>(), 2.0 * 64 * 32 * 16 / 10e3, 1e-6);
  EXPECT_EQ(j["trace"]["i"], 0);
  EXPECT_EQ(j["measured_at"], 1700000000000);
  EXPECT_EQ(j["remeasured_at"], 0);
  EXPECT_EQ(j["worker"], "w0");

  q.json = false;
  c = Capture([&] { return RunQuery(q); });
  EXPECT_EQ(c.code, 0);
  EXPECT_NE(c.out.find("latency       10.000 us"), std::string::npos) << c.out;

  // Another device class: a miss that names the class that has records.
  q.target = "cpu:Other CPU:avx2:64c";
  c = Capture([&] { return RunQuery(q); });
  EXPECT_EQ(c.code, 3);
  EXPECT_NE(c.err.find(codegen::HostDeviceClass()), std::string::npos) << c.err;
}

TEST(CliDbTest, DbSubcommands) {
  TempDir dir;
  std::string path = dir.File("a.db");
  EXPECT_EQ(Capture([&] { return RunDb("stats", path, "", true); }).code, 1);
  EXPECT_EQ(Capture([&] { return RunDb("frobnicate", path, "", false); }).code, 2);
  EXPECT_EQ(Capture([&] { return RunDb("import", path, "", false); }).code, 2);
  InsertBest(path, "cpu:Some CPU:avx512:2c");

  Captured c = Capture([&] { return RunDb("stats", path, "", true); });
  ASSERT_EQ(c.code, 0) << c.err;
  json j = json::parse(c.out);
  EXPECT_EQ(j["workloads"], 1);
  EXPECT_EQ(j["records"], 3);
  EXPECT_EQ(j["ok_records"], 3);

  std::string file = dir.File("out.jsonl");
  c = Capture([&] { return RunDb("export", path, file, false); });
  ASSERT_EQ(c.code, 0) << c.err;
  std::string copy = dir.File("nested/dir/b.db");
  c = Capture([&] { return RunDb("import", copy, file, true); });
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(json::parse(c.out)["inserted"], 3);
  c = Capture([&] { return RunDb("import", copy, file, true); });
  EXPECT_EQ(json::parse(c.out)["duplicates"], 3);

  c = Capture([&] { return RunDb("verify", copy, "", true); });
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(json::parse(c.out)["ok"], true);

  // LATHE_DB is the default path.
  ::setenv("LATHE_DB", copy.c_str(), 1);
  EXPECT_EQ(DefaultDbPath(), copy);
  c = Capture([&] { return RunDb("stats", "", "", true); });
  EXPECT_EQ(json::parse(c.out)["records"], 3);
  ::unsetenv("LATHE_DB");

  // A file that is not a database: exit 1 with a message, untouched.
  std::string junk = dir.File("junk.db");
  db::testing::WriteBytes(junk, std::string(4096, 'j'));
  c = Capture([&] { return RunDb("verify", junk, "", false); });
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("file is not a database"), std::string::npos) << c.err;
  EXPECT_EQ(db::testing::ReadBytes(junk), std::string(4096, 'j'));
}

}  // namespace
}  // namespace lathe::tools
