// lathed's multi-task jobs (JobSpec.tasks): one budget spread over weighted workloads by the
// same driver as the embedded tuner, their progress and objective in JobStatus, validation,
// and a restart that resumes every task with its own trial count. Real gRPC server, real
// SQLite file, a fake worker that reports synthetic results.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "db/database.h"
#include "ir/workload.h"
#include "service_fixture.h"

namespace lathe::daemon::service_testing {
namespace {

class ServiceTasksTest : public ServiceTest {
 protected:
  std::map<std::string, int> RecordsByWorkload() {
    std::map<std::string, int> n;
    auto database = db::Database::Open(db_path_);
    EXPECT_TRUE(database.ok()) << database.status();
    if (!database.ok()) return n;
    (void)(*database)->ForEachRecord([&](const db::Record& r) {
      ++n[r.workload];
      return absl::OkStatus();
    });
    return n;
  }
};

TEST_F(ServiceTasksTest, ABudgetOverWeightedTasksCompletesWithTheObjective) {
  StartServer(Options());
  const std::string job = SubmitTasks(48, 8);
  v1::JobStatus st = Job(job);
  ASSERT_EQ(st.workloads_size(), 3);
  EXPECT_EQ(st.trials_budget(), 48);
  EXPECT_EQ(st.workloads(0).weight(), 3);
  EXPECT_EQ(st.workloads(2).weight(), 2);
  EXPECT_EQ(st.workloads(0).trials_target(), 0) << "the scheduler decides each task's share";
  std::vector<std::string> seen;
  RunWorker(RegisterWorker("host-a"), job, &seen);
  st = Job(job);
  EXPECT_EQ(st.state(), v1::DONE);
  EXPECT_EQ(st.trials_done(), 48);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
  int sum = 0;
  double objective = 0;
  std::map<std::string, int> stored = RecordsByWorkload();
  for (const v1::WorkloadProgress& w : st.workloads()) {
    EXPECT_GE(w.trials_done(), 1) << w.workload() << ": the warm-up gives every task a round";
    EXPECT_EQ(stored[w.workload()], w.trials_done()) << w.workload();
    sum += w.trials_done();
    ASSERT_GT(w.best_latency_us(), 0) << w.workload();
    objective += w.weight() * w.best_latency_us();
  }
  EXPECT_EQ(sum, 48);
  EXPECT_NEAR(st.objective_us(), objective, 1e-9 * objective);
}

TEST_F(ServiceTasksTest, MalformedTasksAreInvalidArgument) {
  StartServer(Options());
  grpc::Status st;
  SubmitTasks(8, 8, &st, {{kSpec, -1}});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("weight"), std::string::npos) << st.error_message();
  SubmitTasks(8, 8, &st, {{kSpec, 1}, {kSpec, 2}});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("given twice"), std::string::npos) << st.error_message();
  SubmitTasks(8, 8, &st, {{kSpec, 1}, {"conv3d:n=1", 1}});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("conv3d"), std::string::npos) << st.error_message();
  // Both forms at once.
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_workloads(kSpec);
  req.mutable_spec()->add_tasks()->set_workload(kSpecB);
  req.mutable_spec()->set_device_class(kDeviceClass);
  v1::SubmitJobResponse resp;
  st = tuner_->SubmitJob(Ctx().get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(StoredRecords(), 0);
  auto database = db::Database::Open(db_path_);
  ASSERT_TRUE(database.ok());
  EXPECT_TRUE((*database)->ListJobs()->empty()) << "a refused job is not stored";
}

TEST_F(ServiceTasksTest, RestartResumesEveryTaskWithItsOwnTrials) {
  StartServer(Options());
  const std::string job = SubmitTasks(48, 8);
  std::string w = RegisterWorker("host-a");
  std::vector<std::string> seen;
  RunWorker(w, job, &seen, 4, /*max_reports=*/5);  // 20 trials, then the daemon goes away
  ASSERT_EQ(seen.size(), 20u);
  // The job's driver applies the reported results on its own thread: under load the status
  // may lag the last report for a moment.
  v1::JobStatus before = Job(job);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       (before.objective_history_size() == 0 || before.trials_done() < 20) &&
       std::chrono::steady_clock::now() < until;
       before = Job(job)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(before.objective_history_size(), 1) << "20 trials give every task a best";
  StopServer();
  std::map<std::string, int> stored = RecordsByWorkload();

  StartServer(Options());
  v1::JobStatus resumed = Job(job);
  ASSERT_EQ(resumed.workloads_size(), 3);
  // The objective's history is the job's, not the daemon's: a graceful stop stores all of it,
  // and the restarted daemon goes on from there.
  ASSERT_GE(resumed.objective_history_size(), before.objective_history_size());
  for (int k = 0; k < before.objective_history_size(); ++k) {
    EXPECT_EQ(resumed.objective_history(k).at_ms(), before.objective_history(k).at_ms()) << k;
    EXPECT_EQ(resumed.objective_history(k).trials_done(), before.objective_history(k).trials_done())
        << k;
    EXPECT_DOUBLE_EQ(resumed.objective_history(k).objective_us(),
                     before.objective_history(k).objective_us())
        << k;
  }
  EXPECT_DOUBLE_EQ(resumed.objective_us(), before.objective_us());
  EXPECT_EQ(resumed.trials_done(), 20);
  EXPECT_EQ(resumed.trials_budget(), 48);
  for (int i = 0; i < 3; ++i) {
    const v1::WorkloadProgress& p = resumed.workloads(i);
    EXPECT_EQ(p.trials_done(), before.workloads(i).trials_done()) << p.workload();
    EXPECT_EQ(p.trials_done(), stored[p.workload()]) << p.workload();
    EXPECT_EQ(p.weight(), before.workloads(i).weight());
  }
  w = RegisterWorker("host-a");
  RunWorker(w, job, &seen);
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::DONE);
  EXPECT_EQ(st.trials_done(), 48);
  std::map<std::string, int> after = RecordsByWorkload();
  int total = 0;
  for (const v1::WorkloadProgress& p : st.workloads()) {
    EXPECT_EQ(after[p.workload()], p.trials_done()) << p.workload();
    total += after[p.workload()];
  }
  EXPECT_EQ(total, 48);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size())
      << "no candidate measured twice across the restart";
  // One history from before the restart to the end: it starts where the first daemon's did,
  // only falls, and ends at the objective.
  ASSERT_GE(st.objective_history_size(), 1);
  EXPECT_EQ(st.objective_history(0).at_ms(), before.objective_history(0).at_ms());
  for (int k = 1; k < st.objective_history_size(); ++k) {
    EXPECT_LT(st.objective_history(k).objective_us(), st.objective_history(k - 1).objective_us());
    EXPECT_GE(st.objective_history(k).at_ms(), st.objective_history(k - 1).at_ms());
  }
  EXPECT_DOUBLE_EQ(st.objective_history(st.objective_history_size() - 1).objective_us(),
                   st.objective_us());
}

}  // namespace
}  // namespace lathe::daemon::service_testing
