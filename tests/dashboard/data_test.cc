// What the dashboard shows (DashboardData), built from a real TunerService over a real
// database, with a fake worker leasing and reporting through the real gRPC server.
#include "dashboard/data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/daemon/service_fixture.h"

namespace lathe::daemon::service_testing {
namespace {

using json = nlohmann::json;

class DashboardDataTest : public ServiceTest {
 protected:
  std::unique_ptr<dashboard::DashboardData> Data(const std::string& figures = "") {
    dashboard::DataOptions o;
    o.db_path = db_path_;
    o.library_figures = figures;
    o.state_cache_ms = 0;  // every State() sees the change just made
    auto d = dashboard::DashboardData::Create(service_.get(), o);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }

  static json Parse(const absl::StatusOr<std::string>& text) {
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? json::parse(*text) : json();
  }
};

TEST_F(DashboardDataTest, StateShowsWorkersLeasesAndJobProgress) {
  StartServer(Options());
  auto data = Data();
  ASSERT_NE(data, nullptr);
  json empty = json::parse(data->State());
  EXPECT_TRUE(empty["workers"].empty());
  EXPECT_TRUE(empty["jobs"].empty());

  const std::string worker = RegisterWorker("host-a");
  // Whatever a worker calls its host comes back intact (the workers are written by hand;
  // control characters are refused at registration).
  const std::string odd_host = "host \"b\" \\ <i>&amp; \u2713";
  const std::string idle = RegisterWorker(odd_host);
  const std::string job = Submit(/*trials=*/16, /*batch=*/8);
  v1::LeaseResponse l = Lease(worker, 4);
  ASSERT_EQ(l.tasks_size(), 4);

  json st = json::parse(data->State());
  ASSERT_EQ(st["workers"].size(), 2u);
  json busy;
  for (const json& w : st["workers"]) {
    if (w["id"] == worker) busy = w;
  }
  EXPECT_EQ(busy["state"], "busy");
  EXPECT_EQ(busy["host"], "host-a");
  EXPECT_EQ(busy["device_class"], kDeviceClass);
  EXPECT_EQ(busy["leased_tasks"], 4);
  EXPECT_EQ(busy["lease_jobs"], json::array({job}));
  EXPECT_GT(busy["last_seen_ms"].get<int64_t>(), 0);
  for (const json& w : st["workers"]) {
    if (w["id"] == idle) {
      EXPECT_EQ(w["host"], odd_host);
      EXPECT_EQ(w["leased_tasks"], 0);
      EXPECT_TRUE(w["lease_jobs"].empty());
    }
  }
  EXPECT_EQ(st["counts"]["workers_busy"], 1);
  EXPECT_EQ(st["counts"]["workers_idle"], 1);
  ASSERT_EQ(st["jobs"].size(), 1u);
  EXPECT_EQ(st["jobs"][0]["id"], job);
  EXPECT_EQ(st["jobs"][0]["state"], "running");
  EXPECT_EQ(st["jobs"][0]["phase"], "tuning");
  EXPECT_EQ(st["jobs"][0]["trials_budget"], 16);
  EXPECT_EQ(st["jobs"][0]["trials_done"], 0);
  EXPECT_TRUE(st["jobs"][0]["objective_us"].is_null());  // no best yet
  EXPECT_TRUE(st["jobs"][0]["eta_s"].is_null());         // no rate yet

  Report(OkReport(worker, l));
  std::vector<std::string> seen;
  RunWorker(worker, job, &seen);
  ASSERT_EQ(Job(job).state(), v1::DONE);
  st = json::parse(data->State());
  const json& j = st["jobs"][0];
  EXPECT_EQ(j["state"], "done");
  EXPECT_EQ(j["trials_done"], 16);
  ASSERT_EQ(j["tasks"].size(), 1u);
  const json& t = j["tasks"][0];
  EXPECT_EQ(t["workload"], "matmul:epilogue=none,k=16,m=16,n=16");
  EXPECT_EQ(t["weight"], 1.0);
  EXPECT_EQ(t["trials_done"], 16);
  EXPECT_GT(t["best_latency_us"].get<double>(), 0);
  EXPECT_GT(t["best_gflops"].get<double>(), 0);
  // One task of weight 1: the objective is its best latency.
  EXPECT_DOUBLE_EQ(j["objective_us"].get<double>(), t["best_latency_us"].get<double>());
  EXPECT_EQ(st["counts"]["jobs_finished"], 1);
}

TEST_F(DashboardDataTest, ViewersPollingAtOnceShareOneBuildOfTheState) {
  StartServer(Options());
  dashboard::DataOptions o;
  o.db_path = db_path_;
  o.state_cache_ms = 60000;
  auto data = dashboard::DashboardData::Create(service_.get(), o);
  ASSERT_TRUE(data.ok()) << data.status();
  const std::string first = (*data)->State();
  RegisterWorker("host-a");
  EXPECT_EQ((*data)->State(), first);  // within the minute: the same answer
  o.state_cache_ms = 0;
  auto fresh = dashboard::DashboardData::Create(service_.get(), o);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(json::parse((*fresh)->State())["workers"].size(), 1u);
}

TEST_F(DashboardDataTest, MultiTaskJobShowsWeightsBudgetAndObjective) {
  StartServer(Options());
  const std::string worker = RegisterWorker("host-a");
  v1::SubmitJobRequest req;
  v1::TaskSpec* a = req.mutable_spec()->add_tasks();
  a->set_workload(kSpec);
  a->set_weight(2);
  v1::TaskSpec* b = req.mutable_spec()->add_tasks();
  b->set_workload("matmul:m=8,n=16,k=16");
  b->set_weight(1);
  req.mutable_spec()->set_device_class(kDeviceClass);
  req.mutable_spec()->set_trials(16);
  req.mutable_spec()->set_batch(4);
  req.mutable_spec()->set_min_repeat_ms(1);
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(tuner_->SubmitJob(Ctx().get(), req, &resp).ok());
  std::vector<std::string> seen;
  RunWorker(worker, resp.job_id(), &seen);
  ASSERT_EQ(Job(resp.job_id()).state(), v1::DONE);
  auto data = Data();
  ASSERT_NE(data, nullptr);
  const json j = json::parse(data->State())["jobs"][0];
  EXPECT_EQ(j["trials_budget"], 16);
  EXPECT_EQ(j["trials_done"], 16);
  ASSERT_EQ(j["tasks"].size(), 2u);
  EXPECT_EQ(j["tasks"][0]["weight"], 2.0);
  EXPECT_EQ(j["tasks"][1]["weight"], 1.0);
  const double objective = 2 * j["tasks"][0]["best_latency_us"].get<double>() +
                           j["tasks"][1]["best_latency_us"].get<double>();
  EXPECT_NEAR(j["objective_us"].get<double>(), objective, 1e-6 * objective);
  EXPECT_EQ(j["phase"], "done");
}

TEST_F(DashboardDataTest, CurveIsTheBestLatencyOverTheTrialsInMeasurementOrder) {
  StartServer(Options());
  const std::string worker = RegisterWorker("host-a");
  const std::string job = Submit(/*trials=*/24, /*batch=*/8);
  std::vector<std::string> seen;
  RunWorker(worker, job, &seen, /*max_tasks=*/2);
  ASSERT_EQ(Job(job).state(), v1::DONE);
  auto data = Data();
  ASSERT_NE(data, nullptr);

  json c = Parse(data->Curve("matmul:n=16,m=16,k=16", kDeviceClass, job));
  EXPECT_EQ(c["workload"], "matmul:epilogue=none,k=16,m=16,n=16");
  EXPECT_EQ(c["trials"], 24);
  EXPECT_EQ(c["ok"], 24);
  EXPECT_EQ(c["job_start_trial"], 1);
  const json& pts = c["points"];
  ASSERT_GE(pts.size(), 1u);
  // Trials increase, the best never gets worse, and the last point is the last trial at the
  // best the database holds.
  for (size_t i = 1; i < pts.size(); ++i) {
    EXPECT_GT(pts[i][0].get<int>(), pts[i - 1][0].get<int>());
    EXPECT_LE(pts[i][1].get<double>(), pts[i - 1][1].get<double>());
  }
  EXPECT_EQ(pts.back()[0], 24);
  double best = 1e300;
  for (const std::string& id : seen) best = std::min(best, FakeMedian(id));
  EXPECT_DOUBLE_EQ(pts.back()[1].get<double>(), best);
  EXPECT_TRUE(c["library"].is_null());
  EXPECT_NE(c["library_note"].get<std::string>().find("--library-figures"), std::string::npos);

  EXPECT_EQ(data->Curve("matmul:m=0", kDeviceClass, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data->Curve(kSpec, kDeviceClass, "job-nope").status().code(),
            absl::StatusCode::kNotFound);
  json none = Parse(data->Curve("matmul:m=8,n=8,k=8", kDeviceClass, ""));
  EXPECT_EQ(none["trials"], 0);
  EXPECT_TRUE(none["points"].empty());
}

TEST_F(DashboardDataTest, LibraryFigureComesFromTheFileOnlyForItsWorkloadAndClass) {
  StartServer(Options());
  const std::string figures = dir_ + "/figures.jsonl";
  {
    std::ofstream out(figures);
    out << "not json\n";
    out << R"({"workload":"matmul:m=16,n=16,k=16","device_class":"cpu:Other:avx2:2c",)"
        << R"("library":"OpenBLAS sgemm 16x16x16","library_gflops":5.0})"
        << "\n";
  }
  auto data = Data(figures);
  ASSERT_NE(data, nullptr);
  json c = Parse(data->Curve(kSpec, kDeviceClass, ""));
  EXPECT_TRUE(c["library"].is_null());
  EXPECT_NE(c["library_note"].get<std::string>().find("no library figure measured"),
            std::string::npos);
  // Appended while the daemon runs (as `lathe tune --json >> FILE` would): read again.
  {
    std::ofstream out(figures, std::ios::app);
    out << R"({"workload":"matmul:k=16,n=16,m=16","device_class":")" << kDeviceClass
        << R"(","library":"OpenBLAS sgemm 16x16x16","library_gflops":4.0,"trials":1})"
        << "\n";
  }
  std::filesystem::last_write_time(
      figures, std::filesystem::last_write_time(figures) + std::chrono::seconds(2));
  c = Parse(data->Curve(kSpec, kDeviceClass, ""));
  ASSERT_TRUE(c["library"].is_object()) << c.dump();
  EXPECT_EQ(c["library"]["name"], "OpenBLAS sgemm 16x16x16");
  EXPECT_EQ(c["library"]["gflops"], 4.0);
  // 2*16^3 flops at 4 GFLOP/s.
  EXPECT_NEAR(c["library"]["latency_us"].get<double>(), 2.0 * 16 * 16 * 16 / 4e3, 1e-9);
}

TEST_F(DashboardDataTest, RecordsExplainTheBestOfEachTaskAndCancelStopsTheJob) {
  StartServer(Options());
  const std::string worker = RegisterWorker("host-a");
  const std::string done_job = Submit(/*trials=*/8, /*batch=*/8);
  std::vector<std::string> seen;
  RunWorker(worker, done_job, &seen);
  auto data = Data();
  ASSERT_NE(data, nullptr);

  json r = Parse(data->Records(done_job));
  ASSERT_EQ(r["records"].size(), 1u);
  const json& rec = r["records"][0];
  EXPECT_TRUE(rec["found"].get<bool>());
  EXPECT_EQ(rec["device_class"], kDeviceClass);
  EXPECT_NE(rec["explanation"].get<std::string>().find("best ok record"), std::string::npos);
  EXPECT_NE(rec["worker"].get<std::string>().find("host-a"), std::string::npos);
  // The schedule in words, one primitive per line.
  EXPECT_NE(rec["schedule"].get<std::string>().find("("), std::string::npos);
  EXPECT_EQ(data->Records("job-nope").status().code(), absl::StatusCode::kNotFound);

  json miss = Parse(data->Best("matmul:m=8,n=8,k=8", kDeviceClass));
  EXPECT_FALSE(miss["found"].get<bool>());
  EXPECT_NE(miss["explanation"].get<std::string>().find("no records"), std::string::npos);
  EXPECT_EQ(data->Best("conv2d:n=1", kDeviceClass).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string running = Submit(/*trials=*/1000, /*batch=*/8);
  json cancelled = Parse(data->Cancel(running));
  EXPECT_EQ(cancelled["state"], "cancelled");
  EXPECT_EQ(Job(running).state(), v1::CANCELLED);
  EXPECT_EQ(data->Cancel("job-nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DashboardDataTest, SampledProgressGivesARateAndTimeLeft) {
  StartServer(Options());
  const std::string worker = RegisterWorker("host-a");
  const std::string job = Submit(/*trials=*/400, /*batch=*/8);
  auto data = Data();
  ASSERT_NE(data, nullptr);
  // Progress over more than JobRates::kMinSpanMs, sampled as the server does every second.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5600);
  while (std::chrono::steady_clock::now() < until) {
    data->Sample();
    v1::LeaseResponse l = Lease(worker, 2, 200);
    if (!l.tasks().empty()) Report(OkReport(worker, l));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  data->Sample();
  json j = json::parse(data->State())["jobs"][0];
  ASSERT_TRUE(j["rate_per_s"].is_number()) << j.dump();
  EXPECT_GT(j["rate_per_s"].get<double>(), 0);
  ASSERT_TRUE(j["eta_s"].is_number()) << j.dump();
  const double left = 400 - j["trials_done"].get<double>();
  EXPECT_NEAR(j["eta_s"].get<double>(), left / j["rate_per_s"].get<double>(), 1e-6);
}

}  // namespace
}  // namespace lathe::daemon::service_testing
