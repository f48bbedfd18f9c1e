// The daemon's job/worker service with real components: a real SQLite file in a temporary
// directory, a real gRPC server on 127.0.0.1:0, and a fake worker (service_fixture.h) that
// leases tasks through the real stubs and reports synthetic results. The re-timing of the
// best at the end of a job: service_retiming_test.cc; restarts: service_restart_test.cc.
#include "daemon/service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/grpc_server.h"
#include "daemon/metrics.h"
#include "lathe/v1/service.grpc.pb.h"
#include "tests/daemon/service_fixture.h"

namespace lathe::daemon {
namespace {

using service_testing::FakeMedian;
using service_testing::kDeviceClass;
using service_testing::kSpec;
using service_testing::ServiceTest;
namespace v1 = lathe::v1;

TEST_F(ServiceTest, FakeWorkerCompletesJobAndRetriedReportIsNotDuplicated) {
  auto metrics = Metrics::Create("127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT((*metrics)->port(), 0);
  ServiceOptions o = Options();
  o.use_cost_model = true;
  o.metrics = metrics->get();
  StartServer(o);
  const std::string job = Submit(16, 8);
  ASSERT_FALSE(job.empty());
  const std::string w = RegisterWorker("fake-host");
  ASSERT_FALSE(w.empty());

  // A watcher sees the job through to its end.
  v1::JobState watched_last = v1::JOB_STATE_UNSPECIFIED;
  int watched = 0;
  std::thread watcher([&] {
    auto ctx = Ctx();
    v1::WatchJobRequest req;
    req.set_job_id(job);
    auto reader = tuner_->WatchJob(ctx.get(), req);
    v1::JobStatus st;
    while (reader->Read(&st)) {
      watched_last = st.state();
      ++watched;
    }
    EXPECT_TRUE(reader->Finish().ok());
  });

  std::vector<std::string> seen;
  v1::LeaseResponse first = Lease(w, 4);
  ASSERT_EQ(first.tasks_size(), 4);
  for (const v1::Task& t : first.tasks()) seen.push_back(t.candidate_id());
  v1::ReportRequest first_report = OkReport(w, first);
  EXPECT_EQ(Report(first_report).accepted(), 4);
  // The same report again (a worker retrying after a lost answer) stores nothing new.
  v1::ReportResponse again = Report(first_report);
  EXPECT_EQ(again.accepted(), 0);
  EXPECT_EQ(again.duplicates(), 4);

  RunWorker(w, job, &seen);
  watcher.join();

  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::DONE);
  ASSERT_EQ(st.workloads_size(), 1);
  EXPECT_EQ(st.workloads(0).trials_done(), 16);
  EXPECT_EQ(st.workloads(0).trials_target(), 16);
  EXPECT_GT(st.workloads(0).best_latency_us(), 0);
  EXPECT_EQ(watched_last, v1::DONE);
  EXPECT_GE(watched, 2);
  EXPECT_EQ(StoredRecords(), 16);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
  EXPECT_EQ(seen.size(), 16u);

  v1::ListWorkersResponse workers;
  ASSERT_TRUE(tuner_->ListWorkers(Ctx().get(), {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).measured(), 16);

  v1::QueryBestRequest q;
  q.set_workload("matmul:k=16,m=16,n=16");
  q.set_device_class(kDeviceClass);
  v1::QueryBestResponse best;
  ASSERT_TRUE(tuner_->QueryBest(Ctx().get(), q, &best).ok());
  EXPECT_TRUE(best.found()) << best.explanation();
  EXPECT_DOUBLE_EQ(best.latency_us(), st.workloads(0).best_latency_us());
  EXPECT_NE(best.worker().find("fake-host"), std::string::npos);
  StopServer();  // before the metrics it reports to
}

// A fleet larger than half a batch: when workers have leased the queue below half a batch, the
// next round is searched before any result comes back (workers never run dry), and the tasks
// in flight stay bounded (4 batches) however greedily workers lease.
TEST_F(ServiceTest, RoundsKeepTheQueueFedAndInflightTasksBounded) {
  StartServer(Options());
  constexpr int kBatch = 8;
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_workloads("matmul:m=64,n=64,k=64");
  req.mutable_spec()->set_device_class(kDeviceClass);
  req.mutable_spec()->set_trials(200);
  req.mutable_spec()->set_batch(kBatch);
  req.mutable_spec()->set_seed(3);
  req.mutable_spec()->set_min_repeat_ms(1);
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(tuner_->SubmitJob(Ctx().get(), req, &submitted).ok());
  const std::string a = RegisterWorker("host-a");
  const std::string b = RegisterWorker("host-b");
  v1::LeaseResponse first = Lease(a, kBatch, 10000);
  ASSERT_EQ(first.tasks_size(), kBatch);
  // No result has come back, and the first round is all leased: b still gets a task.
  v1::LeaseResponse second = Lease(b, kBatch, 10000);
  EXPECT_GT(second.tasks_size(), 0);

  // Leasing on without reporting: rounds stop once 4 batches are in flight.
  std::vector<v1::LeaseResponse> held = {first, second};
  int leased = first.tasks_size() + second.tasks_size();
  for (int i = 0; i < 100; ++i) {
    v1::LeaseResponse more = Lease(b, kBatch, 1500);
    if (more.tasks().empty()) break;
    leased += more.tasks_size();
    held.push_back(more);
  }
  EXPECT_GE(leased, 3 * kBatch);
  EXPECT_LT(leased, 5 * kBatch);
  // A result makes room for another round.
  EXPECT_GT(Report(OkReport(a, first)).accepted(), 0);
  EXPECT_GT(Lease(b, kBatch, 10000).tasks_size(), 0);
}

// A worker stopping mid-Lease (SIGTERM cancels its long poll) takes no task with it: tasks
// queued after it went away go to the next worker at once, not after a lease expiry.
TEST_F(ServiceTest, CancelledLongPollTakesNoTask) {
  ServiceOptions o = Options();
  o.lease_duration_ms = 120000;  // expiry would take two minutes
  StartServer(o);
  const std::string a = RegisterWorker("host-a");
  const std::string b = RegisterWorker("host-b");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status polled;
  std::thread poll([&] {
    v1::LeaseRequest req;
    req.set_worker_id(a);
    req.set_worker_secret(Secret(a));
    req.set_device_class(kDeviceClass);
    req.set_max_tasks(8);
    req.set_wait_ms(20000);
    v1::LeaseResponse resp;
    polled = worker_->Lease(&ctx, req, &resp);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a is waiting in its poll
  ctx.TryCancel();
  poll.join();
  EXPECT_EQ(polled.error_code(), grpc::StatusCode::CANCELLED);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the daemon notices
  Submit(8, 8);
  // The round stays queued (a poll still waiting for a would have taken it at once).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (service_->QueueDepth() < 8 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Lease(b, 8, 0).tasks_size(), 8) << "a cancelled long poll took tasks";
}

// Lease runs on gRPC's callback API: waiting long polls hold no server thread (the synchronous
// server held one per call: 1,000 long-polling workers were 1,000 threads), and a round queued
// goes to the waiting calls at once, while the others keep waiting.
TEST_F(ServiceTest, WaitingLongPollsHoldNoServerThreads) {
  StartServer(Options());
  const std::string a = RegisterWorker("host-a");
  auto threads = [] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.exists();
    return n;
  };
  constexpr int kPolls = 64;
  const int before = threads();
  std::vector<grpc::ClientContext> ctxs(kPolls);
  std::vector<v1::LeaseRequest> reqs(kPolls);
  std::vector<v1::LeaseResponse> resps(kPolls);
  std::vector<grpc::Status> statuses(kPolls);
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0, granted = 0;
  for (int i = 0; i < kPolls; ++i) {
    ctxs[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    reqs[i].set_worker_id(a);
    reqs[i].set_worker_secret(Secret(a));
    reqs[i].set_device_class(kDeviceClass);
    reqs[i].set_max_tasks(1);
    reqs[i].set_wait_ms(60000);
    worker_->async()->Lease(&ctxs[i], &reqs[i], &resps[i], [&, i](grpc::Status st) {
      std::lock_guard<std::mutex> lock(mu);
      statuses[i] = st;
      ++answered;
      granted += resps[i].tasks_size();
      cv.notify_all();
    });
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (service_->WaitingLeases() < kPolls && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(service_->WaitingLeases(), kPolls);
  const int during = threads();
  EXPECT_LT(during - before, kPolls / 2)
      << before << " threads before, " << during << " with " << kPolls << " long polls waiting";
  Submit(8, 8);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return granted >= 8; }))
        << granted << " tasks granted";
    EXPECT_EQ(granted, 8);
    EXPECT_EQ(answered, 8) << "one task per call: 8 calls answered, the others wait";
  }
  EXPECT_EQ(service_->QueueDepth(), 0) << "tasks sat queued while long polls waited";
  EXPECT_EQ(service_->WaitingLeases(), kPolls - 8);
  StopServer();  // answers the waiting calls with an empty lease
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return answered == kPolls; }));
  for (int i = 0; i < kPolls; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_EQ(resps[i].lease_id().empty(), resps[i].tasks_size() == 0) << i;
  }
}

TEST_F(ServiceTest, ExpiredLeaseReturnsTasksToAnotherWorker) {
  ServiceOptions o = Options();
  o.lease_duration_ms = 300;
  StartServer(o);
  const std::string job = Submit(8, 8);
  const std::string a = RegisterWorker("host-a");
  const std::string b = RegisterWorker("host-b");
  v1::LeaseResponse la = Lease(a, 4);
  ASSERT_EQ(la.tasks_size(), 4);
  std::set<std::string> abandoned;
  for (const v1::Task& t : la.tasks()) abandoned.insert(t.candidate_id());
  // a never heartbeats: its lease expires and b is handed its tasks.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  std::vector<std::string> seen;
  RunWorker(b, job, &seen, 8);
  EXPECT_EQ(Job(job).state(), v1::DONE);
  for (const std::string& id : abandoned) {
    EXPECT_EQ(std::count(seen.begin(), seen.end(), id), 1) << id;
  }
  EXPECT_EQ(StoredRecords(), 8);
  // a's late report is harmless: everything in it is already stored.
  v1::ReportResponse late = Report(OkReport(a, la));
  EXPECT_EQ(late.accepted(), 0);
  EXPECT_EQ(late.duplicates(), 4);
  EXPECT_EQ(StoredRecords(), 8);
}

TEST_F(ServiceTest, HeartbeatKeepsLeaseAlive) {
  ServiceOptions o = Options();
  o.lease_duration_ms = 300;
  StartServer(o);
  Submit(8, 8);
  const std::string a = RegisterWorker("host-a");
  v1::LeaseResponse la = Lease(a, 8);
  ASSERT_EQ(la.tasks_size(), 8);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    v1::HeartbeatRequest hb;
    hb.set_worker_id(a);
    hb.set_worker_secret(Secret(a));
    hb.add_lease_ids(la.lease_id());
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(worker_->Heartbeat(Ctx().get(), hb, &resp).ok());
    EXPECT_FALSE(resp.reregister());
  }
  EXPECT_EQ(service_->QueueDepth(), 0);
  EXPECT_EQ(Report(OkReport(a, la)).accepted(), 8);
}

TEST_F(ServiceTest, ReleaseHandsBackUnstartedTasksAtOnce) {
  ServiceOptions o = Options();
  o.lease_duration_ms = 120000;  // expiry would take two minutes
  StartServer(o);
  const std::string job = Submit(8, 8);
  const std::string a = RegisterWorker("host-a");
  const std::string b = RegisterWorker("host-b");
  v1::LeaseResponse held = Lease(a, 8, 10000);
  ASSERT_EQ(held.tasks_size(), 8);
  // Nothing is left for b.
  EXPECT_EQ(Lease(b, 8, 100).tasks_size(), 0);

  auto release = [&](const std::string& worker, const std::string& lease,
                     const std::vector<std::string>& ids, v1::ReleaseResponse* resp) {
    v1::ReleaseRequest req;
    req.set_worker_id(worker);
    req.set_worker_secret(Secret(worker));
    req.set_lease_id(lease);
    for (const std::string& id : ids) req.add_candidate_ids(id);
    return worker_->Release(Ctx().get(), req, resp);
  };
  v1::ReleaseResponse resp;
  // Another worker's lease is not b's to release.
  grpc::Status st = release(b, held.lease_id(), {}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  st = release(a, "", {}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();

  // a measured the first 3 and hands back the other 5 (plus an id not in the lease).
  std::vector<std::string> rest;
  for (int i = 3; i < held.tasks_size(); ++i) rest.push_back(held.tasks(i).candidate_id());
  std::vector<std::string> asked = rest;
  asked.push_back("not-in-the-lease");
  ASSERT_TRUE(release(a, held.lease_id(), asked, &resp).ok());
  EXPECT_EQ(resp.requeued(), 5);
  EXPECT_EQ(service_->QueueDepth(), 5);

  // b gets exactly the released tasks, in their order, without waiting for an expiry.
  const auto t0 = std::chrono::steady_clock::now();
  v1::LeaseResponse again = Lease(b, 8, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_EQ(again.tasks_size(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(again.tasks(i).candidate_id(), rest[i]);

  // a's report of its 3 results still counts; releasing again hands back nothing.
  v1::LeaseResponse first3 = held;
  first3.mutable_tasks()->DeleteSubrange(3, 5);
  EXPECT_EQ(Report(OkReport(a, first3)).accepted(), 3);
  ASSERT_TRUE(release(a, held.lease_id(), {}, &resp).ok());
  EXPECT_EQ(resp.requeued(), 0);
  EXPECT_EQ(Report(OkReport(b, again)).accepted(), 5);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (Job(job).state() != v1::DONE && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Job(job).state(), v1::DONE);
  EXPECT_EQ(Job(job).workloads(0).trials_done(), 8);
  EXPECT_EQ(StoredRecords(), 8);
}

TEST_F(ServiceTest, CancelStopsJob) {
  StartServer(Options());
  const std::string job = Submit(64, 8);
  const std::string w = RegisterWorker("host-a");
  v1::LeaseResponse l = Lease(w, 4);
  ASSERT_EQ(l.tasks_size(), 4);
  v1::CancelJobRequest req;
  req.set_job_id(job);
  v1::CancelJobResponse resp;
  ASSERT_TRUE(tuner_->CancelJob(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.status().state(), v1::CANCELLED);
  EXPECT_EQ(service_->QueueDepth(), 0);
  // Results of the lease in flight are still kept.
  EXPECT_EQ(Report(OkReport(w, l)).accepted(), 4);
  EXPECT_EQ(Lease(w, 4, 100).tasks_size(), 0);
}

// A tasks job with max_trials_per_task (lathe tune --model --tuner --max-trials-per-task):
// no task gets more than its cap, the status shows the cap as each task's target, and the job
// ends when every task is at its cap although its budget is larger. The cap is refused when
// negative or on a workloads job.
TEST_F(ServiceTest, TasksJobHoldsEveryTaskToItsCap) {
  StartServer(Options());
  auto submit = [&](int cap, bool tasks, v1::SubmitJobResponse* resp) {
    v1::SubmitJobRequest req;
    if (tasks) {
      for (const char* spec : {"matmul:m=16,n=16,k=16", "matmul:m=16,n=32,k=16"}) {
        v1::TaskSpec* t = req.mutable_spec()->add_tasks();
        t->set_workload(spec);
        t->set_weight(1);
      }
    } else {
      req.mutable_spec()->add_workloads(kSpec);
    }
    req.mutable_spec()->set_device_class(kDeviceClass);
    req.mutable_spec()->set_trials(64);
    req.mutable_spec()->set_batch(4);
    req.mutable_spec()->set_seed(3);
    req.mutable_spec()->set_min_repeat_ms(1);
    req.mutable_spec()->set_max_trials_per_task(cap);
    return tuner_->SubmitJob(Ctx().get(), req, resp);
  };
  v1::SubmitJobResponse bad;
  EXPECT_EQ(submit(-1, true, &bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status workloads_job = submit(4, false, &bad);
  EXPECT_EQ(workloads_job.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(workloads_job.error_message().find("max_trials_per_task"), std::string::npos)
      << workloads_job.error_message();

  v1::SubmitJobResponse resp;
  ASSERT_TRUE(submit(6, true, &resp).ok());
  const std::string w = RegisterWorker("host-a");
  std::vector<std::string> seen;
  RunWorker(w, resp.job_id(), &seen, /*max_tasks=*/4);
  const v1::JobStatus st = Job(resp.job_id());
  EXPECT_EQ(st.state(), v1::DONE);
  ASSERT_EQ(st.workloads_size(), 2);
  int done = 0;
  for (const v1::WorkloadProgress& p : st.workloads()) {
    EXPECT_EQ(p.trials_done(), 6) << p.workload();
    EXPECT_EQ(p.trials_target(), 6) << p.workload();
    done += p.trials_done();
  }
  EXPECT_EQ(done, 12);
  EXPECT_EQ(st.trials_budget(), 12);  // the caps together, not the 64 asked for
  // The objective's history: points in order of trials, each a fall, the last the objective.
  ASSERT_GT(st.objective_history_size(), 0);
  for (int i = 1; i < st.objective_history_size(); ++i) {
    EXPECT_GE(st.objective_history(i).trials_done(), st.objective_history(i - 1).trials_done());
    EXPECT_NE(st.objective_history(i).objective_us(), st.objective_history(i - 1).objective_us());
  }
  EXPECT_DOUBLE_EQ(st.objective_history().rbegin()->objective_us(), st.objective_us());
  EXPECT_EQ(static_cast<int>(seen.size()), 12);
}

// JobSpec.cold_weights reaches every measurement the workers are handed.
TEST_F(ServiceTest, ColdWeightsJobsHandOutColdMeasurements) {
  StartServer(Options());
  for (const bool cold : {true, false}) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_workloads(kSpec);
    req.mutable_spec()->set_device_class(kDeviceClass);
    req.mutable_spec()->set_trials(4);
    req.mutable_spec()->set_batch(4);
    req.mutable_spec()->set_min_repeat_ms(1);
    req.mutable_spec()->set_cold_weights(cold);
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(tuner_->SubmitJob(Ctx().get(), req, &resp).ok());
    const std::string w = RegisterWorker(cold ? "host-cold" : "host-warm");
    v1::LeaseResponse l = Lease(w, 4);
    ASSERT_GT(l.tasks_size(), 0);
    for (const v1::Task& t : l.tasks()) EXPECT_EQ(t.request().cold_weights(), cold);
    EXPECT_EQ(Report(OkReport(w, l)).accepted(), l.tasks_size());
  }
}

TEST_F(ServiceTest, TokenIsRequired) {
  StartServer(Options(), "s3cret");
  v1::ListJobsResponse resp;
  grpc::Status st = tuner_->ListJobs(Ctx().get(), {}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  st = tuner_->ListJobs(Ctx("wrong").get(), {}, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::RegisterRequest reg;
  reg.set_hostname("h");
  reg.add_devices()->set_device_class(kDeviceClass);
  v1::RegisterResponse rr;
  EXPECT_EQ(worker_->Register(Ctx().get(), reg, &rr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(tuner_->ListJobs(Ctx("s3cret").get(), {}, &resp).ok());
  EXPECT_TRUE(worker_->Register(Ctx("s3cret").get(), reg, &rr).ok());
}

TEST_F(ServiceTest, MalformedRequestsAreInvalidArgument) {
  StartServer(Options());
  const std::string w = RegisterWorker("host-a");
  auto code = [](const grpc::Status& st) { return st.error_code(); };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

  v1::LeaseRequest lease;
  lease.set_worker_id(w);
  lease.set_worker_secret(Secret(w));
  lease.set_max_tasks(-1);
  v1::LeaseResponse lr;
  EXPECT_EQ(code(worker_->Lease(Ctx().get(), lease, &lr)), kInvalid);
  lease.set_max_tasks(1 << 30);
  EXPECT_EQ(code(worker_->Lease(Ctx().get(), lease, &lr)), kInvalid);
  lease.set_max_tasks(1);
  lease.set_wait_ms(-5);
  EXPECT_EQ(code(worker_->Lease(Ctx().get(), lease, &lr)), kInvalid);
  lease.set_wait_ms(0);
  lease.set_worker_id("");
  EXPECT_EQ(code(worker_->Lease(Ctx().get(), lease, &lr)), kInvalid);
  lease.set_worker_id("nobody");
  EXPECT_EQ(code(worker_->Lease(Ctx().get(), lease, &lr)), grpc::StatusCode::NOT_FOUND);

  v1::RegisterRequest reg;
  v1::RegisterResponse rr;
  EXPECT_EQ(code(worker_->Register(Ctx().get(), reg, &rr)), kInvalid);

  v1::ReportRequest rep;
  rep.set_worker_id(w);
  rep.set_worker_secret(Secret(w));
  rep.add_results()->set_candidate_id("");
  v1::ReportResponse rp;
  EXPECT_EQ(code(worker_->Report(Ctx().get(), rep, &rp)), kInvalid);
  rep.mutable_results(0)->set_candidate_id("x");
  rep.mutable_results(0)->set_median_us(-1);
  EXPECT_EQ(code(worker_->Report(Ctx().get(), rep, &rp)), kInvalid);
  // "no device here" is the worker's business (it hands the task back), never a result.
  rep.mutable_results(0)->set_median_us(0);
  rep.mutable_results(0)->set_error_class(v1::NO_DEVICE);
  grpc::Status nd = worker_->Report(Ctx().get(), rep, &rp);
  EXPECT_EQ(code(nd), kInvalid);
  EXPECT_NE(nd.error_message().find("no_device"), std::string::npos) << nd.error_message();

  v1::HeartbeatRequest hb;
  v1::HeartbeatResponse hr;
  EXPECT_EQ(code(worker_->Heartbeat(Ctx().get(), hb, &hr)), kInvalid);

  v1::SubmitJobRequest sub;
  v1::SubmitJobResponse sr;
  EXPECT_EQ(code(tuner_->SubmitJob(Ctx().get(), sub, &sr)), kInvalid);
  sub.mutable_spec()->add_workloads("matmul:m=16,n=16,k=16");
  sub.mutable_spec()->add_workloads("matmul:m=0,n=16");
  sub.mutable_spec()->set_device_class(kDeviceClass);
  grpc::Status st = tuner_->SubmitJob(Ctx().get(), sub, &sr);
  EXPECT_EQ(code(st), kInvalid);
  EXPECT_NE(st.error_message().find("workloads[1]"), std::string::npos) << st.error_message();
  sub.mutable_spec()->mutable_workloads()->RemoveLast();
  sub.mutable_spec()->set_trials(-3);
  EXPECT_EQ(code(tuner_->SubmitJob(Ctx().get(), sub, &sr)), kInvalid);
  sub.mutable_spec()->set_trials(8);
  sub.mutable_spec()->set_target("tpu");
  EXPECT_EQ(code(tuner_->SubmitJob(Ctx().get(), sub, &sr)), kInvalid);

  v1::WatchJobRequest watch;
  auto ctx = Ctx();
  auto reader = tuner_->WatchJob(ctx.get(), watch);
  v1::JobStatus js;
  EXPECT_FALSE(reader->Read(&js));
  EXPECT_EQ(code(reader->Finish()), kInvalid);

  v1::QueryBestRequest q;
  q.set_workload("conv9d:x=1");
  q.set_device_class(kDeviceClass);
  v1::QueryBestResponse qr;
  EXPECT_EQ(code(tuner_->QueryBest(Ctx().get(), q, &qr)), kInvalid);
}

// A job for "cuda" takes the class of the registered real GPU; the emulator's class is its own
// and never stands in for a GPU, nor the other way round.
TEST_F(ServiceTest, CudaJobsNeverTakeTheEmulatorsClass) {
  StartServer(Options());
  auto register_device = [&](const std::string& host, const std::string& device_class) {
    v1::RegisterRequest req;
    req.set_hostname(host);
    v1::DeviceInfo* d = req.add_devices();
    d->set_device_class(device_class);
    d->set_kind(device_class.rfind("cuda-emu:", 0) == 0 ? "cuda-emu" : "cuda");
    v1::RegisterResponse resp;
    ASSERT_TRUE(worker_->Register(Ctx().get(), req, &resp).ok());
  };
  auto submit = [&](const std::string& target, v1::SubmitJobResponse* sr) {
    v1::SubmitJobRequest sub;
    sub.mutable_spec()->add_workloads("matmul:m=16,n=16,k=16");
    sub.mutable_spec()->set_trials(4);
    sub.mutable_spec()->set_target(target);
    return tuner_->SubmitJob(Ctx().get(), sub, sr);
  };
  auto device_class_of = [&](const std::string& job_id) {
    v1::ListJobsResponse jobs;
    EXPECT_TRUE(tuner_->ListJobs(Ctx().get(), {}, &jobs).ok());
    for (const auto& j : jobs.jobs()) {
      if (j.job_id() == job_id) return j.device_class();
    }
    return std::string("(no such job)");
  };
  register_device("emu-host", "cuda-emu:sm_90");
  v1::SubmitJobResponse sr;
  grpc::Status st = submit("cuda", &sr);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("registered GPU classes: none"), std::string::npos)
      << st.error_message();

  const std::string gpu = "cuda:NVIDIA H100 80GB HBM3 (sm_90)";
  register_device("gpu-host", gpu);
  ASSERT_TRUE(submit("cuda", &sr).ok());
  EXPECT_EQ(device_class_of(sr.job_id()), gpu);
  ASSERT_TRUE(submit("cuda-emu:sm_90", &sr).ok());
  EXPECT_EQ(device_class_of(sr.job_id()), "cuda-emu:sm_90");
  // A job names a GPU by ordinal; architectures and malformed emulator targets are refused.
  EXPECT_EQ(submit("cuda:sm_90", &sr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(submit("cuda-emu:90", &sr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, OversizedMessageIsResourceExhaustedAndServerGoesOn) {
  StartServer(Options());
  v1::SubmitJobRequest sub;
  sub.mutable_spec()->add_workloads(std::string(5 << 20, 'x'));
  v1::SubmitJobResponse sr;
  EXPECT_EQ(tuner_->SubmitJob(Ctx().get(), sub, &sr).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(tuner_->ListJobs(Ctx().get(), {}, &jobs).ok());
}

// A worker that cancelled a Lease call whose answer was in flight releases the lease by the
// call's request id: its tasks go to another worker at once, not when the lease expires.
TEST_F(ServiceTest, LeaseWhoseAnswerWasNeverSeenIsReleasedByRequestId) {
  ServiceOptions o = Options();
  o.lease_duration_ms = 120000;  // expiry would take two minutes
  StartServer(o);
  Submit(8, 8);
  const std::string a = RegisterWorker("host-a");
  const std::string b = RegisterWorker("host-b");
  v1::LeaseRequest req;
  req.set_worker_id(a);
  req.set_worker_secret(Secret(a));
  req.set_device_class(kDeviceClass);
  req.set_max_tasks(8);
  req.set_wait_ms(10000);
  req.set_request_id("a-call-1");
  v1::LeaseResponse lost;  // the answer a never saw
  ASSERT_TRUE(worker_->Lease(Ctx().get(), req, &lost).ok());
  ASSERT_EQ(lost.tasks_size(), 8);
  EXPECT_EQ(Lease(b, 8, 100).tasks_size(), 0);

  v1::ReleaseRequest rel;
  rel.set_worker_id(a);
  rel.set_worker_secret(Secret(a));
  rel.set_lease_request_id("a-call-1");
  v1::ReleaseResponse resp;
  ASSERT_TRUE(worker_->Release(Ctx().get(), rel, &resp).ok());
  EXPECT_EQ(resp.requeued(), 8);
  EXPECT_EQ(Lease(b, 8, 1000).tasks_size(), 8);

  // Neither a lease id nor a request id: InvalidArgument.
  rel.clear_lease_request_id();
  grpc::Status st = worker_->Release(Ctx().get(), rel, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Two jobs of one workload at once: neither dispatches a candidate the other already stored,
// so every trial of each is a record of its own.
TEST_F(ServiceTest, ConcurrentJobsOfOneWorkloadMeasureEachCandidateOnce) {
  StartServer(Options());
  const std::string a = Submit(16, 4);
  const std::string b = Submit(16, 4);
  const std::string w = RegisterWorker("host-a");
  std::map<std::string, int> reported;
  const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while ((Job(a).state() != v1::DONE || Job(b).state() != v1::DONE) &&
         std::chrono::steady_clock::now() < stop) {
    v1::LeaseResponse l = Lease(w, 4, 200);
    if (l.tasks().empty()) continue;
    for (const v1::Task& t : l.tasks()) ++reported[t.job_id()];
    v1::ReportResponse r = Report(OkReport(w, l));
    EXPECT_EQ(r.accepted(), l.tasks_size()) << "a candidate was measured twice";
  }
  EXPECT_EQ(Job(a).state(), v1::DONE);
  EXPECT_EQ(Job(b).state(), v1::DONE);
  EXPECT_EQ(reported[a], 16);
  EXPECT_EQ(reported[b], 16);
  EXPECT_EQ(StoredRecords(), 32);
}

}  // namespace
}  // namespace lathe::daemon
