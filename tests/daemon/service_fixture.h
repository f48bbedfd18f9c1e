// \file
// The fixture of the daemon's service tests (service_test.cc, service_retiming_test.cc): a
// real SQLite file in a temporary directory, a real gRPC server on 127.0.0.1:0, and a fake
// worker that leases tasks through the real stubs and reports synthetic results.
#ifndef LATHE_TESTS_DAEMON_SERVICE_FIXTURE_H_
#define LATHE_TESTS_DAEMON_SERVICE_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/grpc_server.h"
#include "daemon/service.h"
#include "db/database.h"
#include "lathe/v1/service.grpc.pb.h"
#include "proto/trace_io.h"

namespace lathe::daemon::service_testing {

namespace v1 = lathe::v1;

inline constexpr char kDeviceClass[] = "cpu:Test CPU:avx2:2c";
inline constexpr char kSpec[] = "matmul:m=16,n=16,k=16";
// Two more workloads, for jobs of several tasks.
inline constexpr char kSpecB[] = "matmul:m=8,n=32,k=16";
inline constexpr char kSpecC[] = "conv2d:n=1,c=4,h=6,w=6,k=4,r=3,s=3,pad=1";

// A synthetic median: deterministic per candidate.
inline double FakeMedian(const std::string& candidate_id) {
  return 10.0 + static_cast<double>(std::hash<std::string>{}(candidate_id) % 1000) / 10.0;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lathe_service_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_path_ = dir_ + "/tuning.db";
  }
  void TearDown() override {
    StopServer();
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  ServiceOptions Options() const {
    ServiceOptions o;
    o.db_path = db_path_;
    o.search.population = 64;  // a small search keeps the test fast; the service is under test
    o.search.generations = 1;
    o.use_cost_model = false;
    o.reaper_interval_ms = 50;
    o.remeasure_top = 0;  // the fake workers below answer trials only; see Retiming* tests
    return o;
  }

  void StartServer(const ServiceOptions& o, const std::string& token = "",
                   const std::string& worker_token = "") {
    auto s = TunerService::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    service_ = std::move(*s);
    GrpcServerOptions g;
    g.listen = "127.0.0.1:0";
    g.token = token;
    g.worker_token = worker_token;
    auto srv = GrpcServer::Start(service_.get(), g);
    ASSERT_TRUE(srv.ok()) << srv.status();
    server_ = std::move(*srv);
    auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    tuner_ = v1::Tuner::NewStub(channel);
    worker_ = v1::WorkerService::NewStub(channel);
  }

  void StopServer() {
    if (server_) server_->Shutdown(std::chrono::milliseconds(1000));
    server_.reset();
    if (service_) service_->Shutdown();
    service_.reset();
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  std::string Submit(int trials, int batch, int seed = 7) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_workloads(kSpec);
    req.mutable_spec()->set_device_class(kDeviceClass);
    req.mutable_spec()->set_trials(trials);
    req.mutable_spec()->set_batch(batch);
    req.mutable_spec()->set_seed(seed);
    req.mutable_spec()->set_min_repeat_ms(1);
    v1::SubmitJobResponse resp;
    grpc::Status st = tuner_->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }

  // A job of several tasks (default: kSpec, kSpecB, kSpecC weighted 3, 1, 2); with `status`,
  // a refusal is returned there instead of failing the test.
  std::string SubmitTasks(int budget, int batch, grpc::Status* status = nullptr,
                          std::vector<std::pair<std::string, double>> tasks = {}) {
    if (tasks.empty()) tasks = {{kSpec, 3}, {kSpecB, 1}, {kSpecC, 2}};
    v1::SubmitJobRequest req;
    for (const auto& [spec, weight] : tasks) {
      v1::TaskSpec* t = req.mutable_spec()->add_tasks();
      t->set_workload(spec);
      t->set_weight(weight);
    }
    req.mutable_spec()->set_device_class(kDeviceClass);
    req.mutable_spec()->set_trials(budget);
    req.mutable_spec()->set_batch(batch);
    req.mutable_spec()->set_seed(7);
    req.mutable_spec()->set_min_repeat_ms(1);
    v1::SubmitJobResponse resp;
    grpc::Status st = tuner_->SubmitJob(Ctx().get(), req, &resp);
    if (status != nullptr) {
      *status = st;
    } else {
      EXPECT_TRUE(st.ok()) << st.error_message();
    }
    return resp.job_id();
  }

  std::string RegisterWorker(const std::string& host) {
    v1::RegisterRequest req;
    req.set_hostname(host);
    v1::DeviceInfo* d = req.add_devices();
    d->set_device_class(kDeviceClass);
    d->set_kind("cpu");
    v1::RegisterResponse resp;
    grpc::Status st = worker_->Register(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_FALSE(resp.worker_secret().empty());
    secrets_[resp.worker_id()] = resp.worker_secret();
    return resp.worker_id();
  }

  // The secret the daemon handed `worker_id` at its registration ("" for an unknown id).
  std::string Secret(const std::string& worker_id) const {
    auto it = secrets_.find(worker_id);
    return it == secrets_.end() ? "" : it->second;
  }

  v1::LeaseResponse Lease(const std::string& worker_id, int max_tasks, int wait_ms = 2000) {
    v1::LeaseRequest req;
    req.set_worker_id(worker_id);
    req.set_worker_secret(Secret(worker_id));
    req.set_device_class(kDeviceClass);
    req.set_max_tasks(max_tasks);
    req.set_wait_ms(wait_ms);
    v1::LeaseResponse resp;
    grpc::Status st = worker_->Lease(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  v1::ReportRequest OkReport(const std::string& worker_id, const v1::LeaseResponse& l) const {
    v1::ReportRequest req;
    req.set_worker_id(worker_id);
    req.set_worker_secret(Secret(worker_id));
    req.set_lease_id(l.lease_id());
    req.set_device_class(kDeviceClass);
    for (const v1::Task& t : l.tasks()) {
      v1::MeasureResult* r = req.add_results();
      r->set_candidate_id(t.candidate_id());
      const double m = FakeMedian(t.candidate_id());
      r->add_repeats_us(m);
      r->add_repeats_us(m);
      r->add_repeats_us(m);
      r->set_median_us(m);
    }
    return req;
  }

  v1::ReportResponse Report(const v1::ReportRequest& req) {
    v1::ReportResponse resp;
    grpc::Status st = worker_->Report(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  v1::JobStatus Job(const std::string& id) {
    auto st = service_->GetJob(id);
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : v1::JobStatus();
  }

  // Leases and reports until the job ends (or `max_reports` reports were sent); records
  // every candidate id it was handed in `seen`.
  void RunWorker(const std::string& worker_id, const std::string& job_id,
                 std::vector<std::string>* seen, int max_tasks = 4, int max_reports = 1000) {
    const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(40);
    for (int reports = 0; reports < max_reports && std::chrono::steady_clock::now() < stop;) {
      if (Job(job_id).state() == v1::DONE) return;
      v1::LeaseResponse l = Lease(worker_id, max_tasks, 200);
      if (l.tasks().empty()) continue;
      for (const v1::Task& t : l.tasks()) {
        EXPECT_EQ(t.job_id(), job_id);
        EXPECT_EQ(t.device_class(), kDeviceClass);
        // The workload once: the trace travels as a message whose own workload is empty.
        EXPECT_FALSE(t.request().workload().empty());
        EXPECT_TRUE(traceio::HasTraceMessage(t.request()));
        v1::Trace trace;
        EXPECT_TRUE(trace.ParseFromString(t.request().trace()));
        EXPECT_TRUE(trace.workload().empty());
        EXPECT_GT(trace.instructions_size(), 0);
        EXPECT_TRUE(t.request().trace_json().empty());
        seen->push_back(t.candidate_id());
      }
      v1::ReportResponse r = Report(OkReport(worker_id, l));
      EXPECT_EQ(r.accepted(), l.tasks_size());
      ++reports;
    }
  }

  int64_t StoredRecords() {
    auto database = db::Database::Open(db_path_);
    EXPECT_TRUE(database.ok()) << database.status();
    if (!database.ok()) return -1;
    auto stats = (*database)->GetStats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    return stats.ok() ? stats->records : -1;
  }

  std::string dir_, db_path_;
  std::map<std::string, std::string> secrets_;  // worker id -> its secret
  std::unique_ptr<TunerService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Tuner::Stub> tuner_;
  std::unique_ptr<v1::WorkerService::Stub> worker_;
};

}  // namespace lathe::daemon::service_testing

#endif  // LATHE_TESTS_DAEMON_SERVICE_FIXTURE_H_
