// The `lathe query` and `lathe db` command functions (tools/cli_db.h): exit statuses and
// JSON fields of CONTRACT.md, on a real database file.

#include "tools/cli_db.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "codegen/host.h"
#include "db/database.h"
#include "db/jsonl.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "tests/db/test_util.h"
#include "tools/record_check.h"

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

// A real trace of kSpec (the naive schedule) that replays and lowers; `sketch` tells records
// apart.
std::string TraceOf(const std::string& spec, int sketch) {
  ir::Trace t;
  t.workload = ir::ParseWorkloadSpec(spec)->ToString();
  t.sketch = sketch;
  return traceio::TraceToJson(t);
}

// An ok record of kSpec with a real trace.
db::Record GoodRecord(const std::string& id, const std::string& device_class, double median_us) {
  db::Record r;
  r.candidate_id = id;
  r.workload = ir::ParseWorkloadSpec(kSpec)->ToString();
  r.workload_key = ir::WorkloadKey(r.workload);
  r.device_class = device_class;
  r.trace_json = TraceOf(kSpec, 10);
  r.repeats_us = {median_us, median_us, median_us};
  r.median_us = median_us;
  r.worker = "w";
  r.measured_at_ms = 1700000000000;
  return r;
}

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
    r.trace_json = TraceOf(kSpec, 10 + i);
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
  // The three records hold one program (traces differing only in their sketch number).
  EXPECT_EQ(j["trace"]["workload"], ir::ParseWorkloadSpec(kSpec)->ToString());
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

TEST(CliDbTest, PeakBoundsOfDeviceClasses) {
  // 16 lanes x 2 FMA units x 2 flops x 2 cores x 5 GHz.
  EXPECT_EQ(PeakGflopsBound("cpu:Some CPU:avx512:2c"), 640.0);
  EXPECT_EQ(PeakGflopsBound("cpu:Other CPU:avx2:8c"), 1280.0);
  EXPECT_EQ(PeakGflopsBound("cpu:Arm:neon:4c"), 320.0);
  EXPECT_GT(*PeakGflopsBound("cuda:NVIDIA H100 80GB HBM3 (sm_90)"), 100000.0);
  EXPECT_LT(*PeakGflopsBound("cuda:NVIDIA H100 80GB HBM3 (sm_90)"), 1000000.0);
  EXPECT_FALSE(PeakGflopsBound("tpu:v5").has_value());
  EXPECT_FALSE(PeakGflopsBound("cpu:no cores").has_value());
}

TEST(CliDbTest, ImportRefusesGarbageTracesAndImpossibleLatencies) {
  TempDir dir;
  const std::string cpu = "cpu:Some CPU:avx512:2c";
  db::Record good = GoodRecord("good", cpu, 10);
  db::Record garbage = GoodRecord("garbage", cpu, 5);
  garbage.trace_json = "{\"instructions\":[{\"kind\":\"split\",\"what\":\"ever\"}]}";
  db::Record fast = GoodRecord("fast", cpu, 1e-9);  // 65536 flops in 1e-9 us: 6.5e7 GFLOP/s
  db::Record other = GoodRecord("other", cpu, 5);
  other.trace_json = TraceOf("matmul:m=8,n=8,k=8", 10);  // a trace of another workload
  db::Record wrong_key = GoodRecord("wrong-key", cpu, 5);
  wrong_key.workload_key = "0123456789abcdef";
  std::string file = dir.File("in.jsonl");
  db::testing::WriteBytes(
      file, "{\"format\":\"lathe-records\",\"version\":1}\n" + db::RecordToJsonLine(garbage) +
                "\n" + db::RecordToJsonLine(good) + "\n" + db::RecordToJsonLine(fast) + "\n" +
                db::RecordToJsonLine(other) + "\n" + db::RecordToJsonLine(wrong_key) + "\n");
  std::string path = dir.File("t.db");
  Captured c = Capture([&] { return RunDb("import", path, file, true); });
  EXPECT_EQ(c.code, 1) << c.err;
  json j = json::parse(c.out);
  EXPECT_EQ(j["records"], 5);
  EXPECT_EQ(j["inserted"], 1);
  EXPECT_EQ(j["refused"], 4);
  ASSERT_EQ(j["refusals"].size(), 4u);
  EXPECT_EQ(j["refusals"][0]["line"], 2);
  EXPECT_EQ(j["refusals"][0]["candidate_id"], "garbage");
  EXPECT_NE(j["refusals"][0]["reason"].get<std::string>().find("trace"), std::string::npos);
  EXPECT_EQ(j["refusals"][1]["line"], 4);
  EXPECT_NE(j["refusals"][1]["reason"].get<std::string>().find(
                "GFLOP/s, more than the 640 GFLOP/s that device class 'cpu:Some CPU:avx512:2c' "
                "can do"),
            std::string::npos)
      << j["refusals"][1]["reason"];
  EXPECT_EQ(j["refusals"][2]["line"], 5);
  EXPECT_NE(j["refusals"][2]["reason"].get<std::string>().find("does not replay"),
            std::string::npos)
      << j["refusals"][2]["reason"];
  EXPECT_EQ(j["refusals"][3]["line"], 6);
  EXPECT_NE(j["refusals"][3]["reason"].get<std::string>().find("is not the key of workload"),
            std::string::npos);
  EXPECT_NE(c.err.find(file + ":2: refused record 'garbage': trace"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("4 record(s) of " + file + " refused"), std::string::npos) << c.err;

  // The good record is the best one; the impossible one never became it.
  QueryOptions q;
  q.workload = kSpec;
  q.db_path = path;
  q.device_class = cpu;
  q.json = true;
  c = Capture([&] { return RunQuery(q); });
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(json::parse(c.out)["candidate_id"], "good");
}

TEST(CliDbTest, VerifyReportsImpossibleRecordsAlreadyStored) {
  TempDir dir;
  std::string path = dir.File("t.db");
  const std::string cpu = "cpu:Some CPU:avx512:2c";
  {
    absl::StatusOr<std::unique_ptr<db::Database>> database = db::Database::Open(path);
    ASSERT_TRUE(database.ok()) << database.status();
    ASSERT_TRUE((*database)->Insert(GoodRecord("good", cpu, 10)).ok());
  }
  Captured c = Capture([&] { return RunDb("verify", path, "", true); });
  EXPECT_EQ(c.code, 0) << c.out << c.err;
  {
    absl::StatusOr<std::unique_ptr<db::Database>> database = db::Database::Open(path);
    ASSERT_TRUE(database.ok()) << database.status();
    ASSERT_TRUE((*database)->Insert(GoodRecord("too-fast", cpu, 1e-9)).ok());
  }
  c = Capture([&] { return RunDb("verify", path, "", true); });
  EXPECT_EQ(c.code, 1);
  json j = json::parse(c.out);
  EXPECT_EQ(j["ok"], false);
  ASSERT_EQ(j["problems"].size(), 1u) << c.out;
  const std::string problem = j["problems"][0];
  EXPECT_EQ(problem.rfind("record 'too-fast' (matmul:", 0), 0u) << problem;
  EXPECT_NE(problem.find("GFLOP/s, more than the 640 GFLOP/s"), std::string::npos) << problem;
}

}  // namespace
}  // namespace lathe::tools
