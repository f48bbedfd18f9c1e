// Multi-task tuning on this machine (the embedded driver with its real measurement child and
// a real SQLite file), and `lathe tune --workload A --workload B` / `--tasks FILE` run as a
// user runs them: budgets, weights, the objective, and bad task lists refused before anything
// is written.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codegen/host.h"
#include "cost_model/database_io.h"
#include "db/database.h"
#include "ir/workload.h"
#include "tests/tuner/cli_run.h"
#include "tuner/tune.h"

namespace lathe::tuner {
namespace {

constexpr char kA[] = "matmul:m=32,n=32,k=32";
constexpr char kB[] = "matmul:m=16,n=64,k=16";
constexpr char kC[] = "conv2d:n=1,c=8,h=8,w=8,k=8,r=3,s=3,pad=1";

class TuneTasksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lathe_tune_tasks_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_path_ = dir_ + "/tuning.db";
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  TuneOptions Options(int trials) const {
    TuneOptions o;
    o.tasks = {{kA, 3}, {kB, 1}, {kC, 2}};
    o.trials = trials;
    o.batch = 8;
    o.db_path = db_path_;
    o.seed = 7;
    o.min_repeat_ms = 2;
    o.remeasure_top = 0;
    o.measure_child = LATHE_MEASURE_BIN;
    o.search.population = 128;
    o.search.generations = 1;
    return o;
  }

  // Stored records per workload key.
  std::map<std::string, int> RecordsByWorkload() const {
    std::map<std::string, int> n;
    auto database = db::Database::Open(db_path_);
    EXPECT_TRUE(database.ok()) << database.status();
    if (!database.ok()) return n;
    (void)(*database)->ForEachRecord([&](const db::Record& r) {
      ++n[r.workload_key];
      return absl::OkStatus();
    });
    return n;
  }

  std::string WriteFile(const std::string& name, const std::string& text) const {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  std::string dir_;
  std::string db_path_;
};

TEST_F(TuneTasksTest, SharesOneBudgetOverEveryTaskAndReportsTheObjective) {
  TuneOptions o = Options(40);
  int progress_calls = 0;
  o.on_progress = [&](const TuneProgress& p) {
    ++progress_calls;
    ASSERT_EQ(p.tasks.size(), 3u);
    EXPECT_EQ(p.trials_target, 40);
    int sum = 0;
    for (const TuneTaskProgress& t : p.tasks) sum += t.trials;
    EXPECT_EQ(sum, p.trials_done);
  };
  absl::StatusOr<TuneResult> r = Tune(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(progress_calls, 0);
  EXPECT_EQ(r->trials, 40);
  ASSERT_EQ(r->tasks.size(), 3u);
  int sum = 0;
  double objective = 0;
  std::map<std::string, int> stored = RecordsByWorkload();
  for (const TuneTaskResult& t : r->tasks) {
    EXPECT_GE(t.trials, 8) << t.workload << ": the warm-up gives every task a round";
    sum += t.trials;
    ASSERT_TRUE(t.has_best) << t.workload;
    objective += t.weight * t.best_latency_us;
    EXPECT_EQ(stored[t.workload_key], t.trials) << t.workload;
  }
  EXPECT_EQ(sum, 40);
  EXPECT_NEAR(r->objective_us, objective, 1e-9 * objective);
  EXPECT_EQ(r->tasks[0].weight, 3);
  EXPECT_EQ(r->tasks[2].workload, ir::MakeWorkload(kC)->canonical);

  // The features the search computed for the ok records are in the database (no start lowers
  // them again), and they are the features of the record's program.
  {
    auto database = db::Database::Open(db_path_);
    ASSERT_TRUE(database.ok());
    auto top = (*database)->TopK(r->tasks[0].workload_key, r->device_class, 1000);
    ASSERT_TRUE(top.ok());
    int64_t lowered = -1;
    std::vector<std::optional<cost_model::FeatureMatrix>> f =
        cost_model::FeaturesOfRecords(**database, *top, &lowered);
    EXPECT_EQ(lowered, 0) << "an ok record of this run without stored features";
    ASSERT_FALSE(top->empty());
    absl::StatusOr<ir::LoweredFunc> fn =
        cost_model::LowerRecordTrace(top->front().trace_json, top->front().device_class);
    ASSERT_TRUE(fn.ok());
    absl::StatusOr<cost_model::FeatureMatrix> fresh = cost_model::ExtractFeatures(*fn);
    ASSERT_TRUE(fresh.ok() && f[0].has_value());
    EXPECT_EQ(f[0]->data, fresh->data);
  }

  // A second run resumes: nothing measured twice, each task's records grow.
  o.trials = 16;
  o.on_progress = nullptr;
  absl::StatusOr<TuneResult> again = Tune(o);
  ASSERT_TRUE(again.ok()) << again.status();
  std::map<std::string, int> after = RecordsByWorkload();
  int grown = 0;
  for (const auto& [key, n] : after) grown += n - stored[key];
  EXPECT_EQ(grown, 16);
}

TEST_F(TuneTasksTest, RoundRobinAndBadTaskListsAreRefusedBeforeAnythingIsWritten) {
  TuneOptions o = Options(24);
  o.scheduler = "round-robin";
  absl::StatusOr<TuneResult> r = Tune(o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const TuneTaskResult& t : r->tasks) EXPECT_EQ(t.trials, 8) << t.workload;

  const std::string fresh = dir_ + "/fresh.db";
  auto refused = [&](TuneOptions bad, const std::string& what) {
    bad.db_path = fresh;
    absl::StatusOr<TuneResult> res = Tune(bad);
    ASSERT_FALSE(res.ok()) << what;
    EXPECT_TRUE(absl::IsInvalidArgument(res.status())) << res.status();
    EXPECT_NE(res.status().message().find(what), std::string::npos) << res.status();
    EXPECT_FALSE(std::filesystem::exists(fresh)) << what;
  };
  TuneOptions bad = Options(8);
  bad.tasks[1].weight = -1;
  refused(bad, "weight -1");
  bad = Options(8);
  bad.tasks.push_back({kA, 1});
  refused(bad, "given twice");
  bad = Options(8);
  bad.tasks[2].workload = "conv3d:n=1";
  refused(bad, "task 3");
  bad = Options(8);
  bad.scheduler = "greedy";
  refused(bad, "greedy");
}

TEST_F(TuneTasksTest, CliTasksFileAndRepeatedWorkloadsPrintTasksAndObjective) {
  const std::string tasks =
      WriteFile("tasks.jsonl", std::string("# two tasks\n{\"workload\": \"") + kA +
                                   "\", \"weight\": 4}\n\n{\"workload\": \"" + kB + "\"}\n");
  CliRun r = Lathe("tune --tasks " + tasks +
                       " --trials 16 --batch 8 --min-repeat-ms 2 --remeasure-top 0 --json --db " +
                       db_path_,
                   /*with_stderr=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j.value("trials", -1), 16);
  ASSERT_TRUE(j.contains("tasks") && j["tasks"].is_array());
  ASSERT_EQ(j["tasks"].size(), 2u);
  double objective = 0;
  int trials = 0;
  for (const nlohmann::json& t : j["tasks"]) {
    ASSERT_TRUE(t["best_latency_us"].is_number()) << t.dump();
    objective += t["weight"].get<double>() * t["best_latency_us"].get<double>();
    trials += t["trials"].get<int>();
    EXPECT_GT(t.value("best_gflops", 0.0), 0);
  }
  EXPECT_EQ(trials, 16);
  EXPECT_EQ(j["tasks"][0].value("weight", 0.0), 4);
  ASSERT_TRUE(j["objective_us"].is_number());
  EXPECT_NEAR(j["objective_us"].get<double>(), objective, 1e-6 * objective);
  // The single-workload fields describe the first task.
  EXPECT_EQ(j.value("workload", ""), ir::MakeWorkload(kA)->canonical);
  EXPECT_FALSE(j.value("device_class", "").empty());

  // Repeated --workload: the same, weight 1 each; the summary names every task.
  r = Lathe(std::string("tune --workload ") + kA + " --workload " + kC +
                " --trials 16 --batch 8 --min-repeat-ms 2 --remeasure-top 0 --db " + db_path_,
            /*with_stderr=*/true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("objective"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ir::MakeWorkload(kC)->canonical), std::string::npos) << r.out;
}

// --max-trials-per-task holds every task to its cap; when every task is at its cap the run
// ends below --trials. A negative cap is a usage error (exit 2) that writes nothing.
TEST_F(TuneTasksTest, CliCapsTheTrialsOfEachTask) {
  CliRun r = Lathe(std::string("tune --workload ") + kA + " --workload " + kB +
                       " --trials 40 --max-trials-per-task 8 --batch 8 --min-repeat-ms 2 "
                       "--remeasure-top 0 --json --db " +
                       db_path_,
                   /*with_stderr=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.contains("tasks") && j["tasks"].is_array());
  ASSERT_EQ(j["tasks"].size(), 2u);
  for (const nlohmann::json& t : j["tasks"]) EXPECT_EQ(t.value("trials", -1), 8) << t.dump();
  EXPECT_EQ(j.value("trials", -1), 16);
  for (const auto& [key, n] : RecordsByWorkload()) EXPECT_EQ(n, 8) << key;

  const std::string fresh = dir_ + "/fresh.db";
  r = Lathe(std::string("tune --workload ") + kA + " --workload " + kB +
                " --trials 8 --max-trials-per-task -1 --db " + fresh,
            /*with_stderr=*/true);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-trials-per-task -1"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

// --weights cold times every candidate with its parameters evicted (MeasureRequest.cold_weights)
// and stores the trials as usual; an unknown value is a usage error that writes nothing.
TEST_F(TuneTasksTest, CliColdWeightsTunesAndBadValuesAreRefused) {
  CliRun r = Lathe(std::string("tune --workload ") + kA + " --workload " + kB +
                       " --trials 8 --batch 4 --min-repeat-ms 2 --weights cold "
                       "--remeasure-top 1 --json --db " +
                       db_path_,
                   /*with_stderr=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j.value("trials", -1), 8);
  int stored = 0;
  for (const auto& [key, n] : RecordsByWorkload()) stored += n;
  EXPECT_EQ(stored, 8);

  const std::string fresh = dir_ + "/fresh.db";
  r = Lathe(std::string("tune --workload ") + kA + " --trials 4 --weights lukewarm --db " + fresh,
            /*with_stderr=*/true);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--weights 'lukewarm'"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

TEST_F(TuneTasksTest, CliBadTasksFilesExitTwoNamingTheLineAndWriteNothing) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {std::string("{\"workload\": \"") + kA + "\"}\n{\"workload\": \"" + kB + "\", \n",
       "line 2: not a JSON object"},
      {std::string("{\"workload\": \"") + kA + "\"}\n\n{\"workload\": \"conv3d:n=1\"}\n",
       "line 3: "},
      {std::string("{\"workload\": \"") + kA + "\", \"weight\": -2}\n", "line 1: weight -2"},
      {std::string("{\"workload\": \"") + kA + "\", \"weight\": \"heavy\"}\n",
       "\"weight\" must be a number"},
      {std::string("{\"workload\": \"") + kA + "\", \"wieght\": 2}\n", "unknown key 'wieght'"},
      {"", "holds no task"},
      {"# only a comment\n\n", "holds no task"},
  };
  const std::string db = dir_ + "/never.db";
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string file = WriteFile("bad" + std::to_string(i) + ".jsonl", cases[i].text);
    CliRun r = Lathe("tune --tasks " + file + " --trials 4 --db " + db, /*with_stderr=*/true);
    EXPECT_EQ(r.code, 2) << cases[i].text << "\n" << r.out;
    EXPECT_NE(r.out.find(cases[i].message), std::string::npos) << r.out;
    if (cases[i].message.rfind("line", 0) == 0) {
      EXPECT_NE(r.out.find(file), std::string::npos) << "the message names the file: " << r.out;
    }
    // Refused before a connection is tried, too.
    r = Lathe("tune --tasks " + file + " --tuner 127.0.0.1:1", /*with_stderr=*/true);
    EXPECT_EQ(r.code, 2) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(db));
  CliRun r = Lathe("tune --tasks " + dir_ + "/missing.jsonl --db " + db, true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("cannot read tasks file"), std::string::npos) << r.out;
  r = Lathe(std::string("tune --workload ") + kA + " --workload " + kA + " --db " + db, true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("given twice"), std::string::npos) << r.out;
  r = Lathe(
      std::string("tune --workload ") + kA + " --workload " + kB + " --scheduler greedy --db " + db,
      true);
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::filesystem::exists(db));
}

}  // namespace
}  // namespace lathe::tuner
