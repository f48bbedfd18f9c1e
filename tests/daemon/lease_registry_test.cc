// The lease registry of lathed on its own (no database, no gRPC): what a lease takes from the
// queue when tasks are large.
#include "daemon/lease_registry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lathe::daemon {
namespace {

namespace v1 = lathe::v1;

constexpr char kDeviceClass[] = "cpu:Test CPU:avx2:2c";
constexpr int64_t kDefaultClientLimit = 4 << 20;  // what gRPC clients receive by default

// `n` tasks of job "job-1" whose traces are `trace_bytes` long.
std::vector<v1::Task> Tasks(int n, size_t trace_bytes, const std::string& prefix = "c") {
  std::vector<v1::Task> tasks;
  for (int i = 0; i < n; ++i) {
    v1::Task t;
    t.set_candidate_id(prefix + std::to_string(i));
    t.set_job_id("job-1");
    t.set_device_class(kDeviceClass);
    t.mutable_request()->set_candidate_id(t.candidate_id());
    t.mutable_request()->set_workload("matmul:m=16,n=16,k=16");
    t.mutable_request()->set_trace_json(std::string(trace_bytes, 'x'));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

class LeaseRegistryTest : public ::testing::Test {
 protected:
  void Start(const LeaseRegistryOptions& o) {
    registry_ = std::make_unique<LeaseRegistry>(o);
    registry_->Start();
    v1::RegisterRequest req;
    req.set_hostname("host-a");
    req.add_devices()->set_device_class(kDeviceClass);
    auto resp = registry_->Register(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    worker_ = resp->worker_id();
    secret_ = resp->worker_secret();
  }

  v1::LeaseResponse Lease(int max_tasks, const std::string& request_id = "") {
    v1::LeaseRequest req;
    req.set_worker_id(worker_);
    req.set_worker_secret(secret_);
    req.set_device_class(kDeviceClass);
    req.set_max_tasks(max_tasks);
    req.set_wait_ms(0);
    req.set_request_id(request_id);
    auto resp = registry_->Lease(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::LeaseResponse();
  }

  std::unique_ptr<LeaseRegistry> registry_;
  std::string worker_;
  std::string secret_;  // worker_'s
};

TEST_F(LeaseRegistryTest, LeaseOfLargeTasksStaysUnderTheClientsReceiveLimit) {
  Start(LeaseRegistryOptions());
  // 1 MiB traces: 10 of them would make a 10 MiB response.
  ASSERT_EQ(registry_->Enqueue(0, Tasks(10, 1 << 20)), 10);
  std::vector<std::string> leased;
  for (int i = 0; i < 10 && registry_->Queued() > 0; ++i) {
    v1::LeaseResponse l = Lease(10);
    EXPECT_LE(static_cast<int64_t>(l.ByteSizeLong()), LeaseRegistryOptions().max_lease_bytes);
    EXPECT_LT(static_cast<int64_t>(l.ByteSizeLong()), kDefaultClientLimit);
    // Two tasks fit in 3 MiB, a third would not.
    EXPECT_EQ(l.tasks_size(), 2);
    for (const v1::Task& t : l.tasks()) leased.push_back(t.candidate_id());
  }
  // Nothing lost, nothing twice, in queue order: the task that did not fit led the next lease.
  ASSERT_EQ(leased.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(leased[i], "c" + std::to_string(i));
}

TEST_F(LeaseRegistryTest, TaskLargerThanTheBudgetGoesAlone) {
  LeaseRegistryOptions o;
  o.max_lease_bytes = 4096;
  Start(o);
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 8192, "big")), 2);
  ASSERT_EQ(registry_->Enqueue(0, Tasks(3, 100, "small")), 3);
  EXPECT_EQ(Lease(8).tasks_size(), 1);  // big0 alone
  EXPECT_EQ(Lease(8).tasks_size(), 1);  // big1 alone: small ones do not jump ahead of it
  v1::LeaseResponse rest = Lease(8);
  ASSERT_EQ(rest.tasks_size(), 3);
  EXPECT_EQ(rest.tasks(0).candidate_id(), "small0");
  EXPECT_EQ(registry_->Queued(), 0);
}

TEST_F(LeaseRegistryTest, SmallTasksAreBoundByMaxTasksOnly) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(1024, 200)), 1024);
  EXPECT_EQ(Lease(1024).tasks_size(), 1024);
}

// A worker that gave up on a Lease call whose answer was in flight (it was stopping) releases
// the lease by the call's request id: the tasks are leased again at once, not at expiry.
TEST_F(LeaseRegistryTest, ReleaseByRequestIdHandsBackALeaseWhoseAnswerWasNeverSeen) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(3, 10)), 3);
  ASSERT_EQ(Lease(2, "req-1").tasks_size(), 2);  // the answer the worker never saw
  EXPECT_EQ(registry_->Queued(), 1);
  v1::ReleaseRequest rel;
  rel.set_worker_id(worker_);
  rel.set_worker_secret(secret_);
  rel.set_lease_request_id("req-1");
  auto released = registry_->Release(rel);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->requeued(), 2);
  EXPECT_EQ(registry_->Queued(), 3);
  // Back at the front of the queue, in their order.
  v1::LeaseResponse again = Lease(3, "req-2");
  ASSERT_EQ(again.tasks_size(), 3);
  EXPECT_EQ(again.tasks(0).candidate_id(), "c0");
  EXPECT_EQ(again.tasks(1).candidate_id(), "c1");
  // Released once: a second release finds no lease for it (and a reused id is refused).
  released = registry_->Release(rel);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->requeued(), 0);
  v1::LeaseRequest reuse;
  reuse.set_worker_id(worker_);
  reuse.set_worker_secret(secret_);
  reuse.set_max_tasks(1);
  reuse.set_request_id("req-2");
  EXPECT_EQ(registry_->Lease(reuse).status().code(), absl::StatusCode::kAlreadyExists);
}

// The registry remembers at most 65536 released request ids: past that the oldest is
// forgotten first (its late call then leases as usual), and one id released over and over
// counts once.
TEST_F(LeaseRegistryTest, RememberedReleasesAreBoundedOldestForgottenFirst) {
  Start(LeaseRegistryOptions());
  v1::ReleaseRequest rel;
  rel.set_worker_id(worker_);
  rel.set_worker_secret(secret_);
  for (int i = 0; i < 3; ++i) {
    rel.set_lease_request_id("again");
    ASSERT_TRUE(registry_->Release(rel).ok());
  }
  constexpr int kRemembered = 65536;
  for (int i = 0; i < kRemembered; ++i) {
    rel.set_lease_request_id("r" + std::to_string(i));
    ASSERT_TRUE(registry_->Release(rel).ok());
  }
  ASSERT_EQ(registry_->Enqueue(0, Tasks(4, 10)), 4);
  v1::LeaseRequest req;
  req.set_worker_id(worker_);
  req.set_worker_secret(secret_);
  req.set_device_class(kDeviceClass);
  req.set_max_tasks(1);
  // 65539 releases of 65537 ids: "again" (the oldest) went first, "r0" is still remembered.
  req.set_request_id("again");
  auto first = registry_->Lease(req);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->tasks_size(), 1);
  for (const char* id : {"r0", "r65535"}) {
    req.set_request_id(id);
    EXPECT_EQ(registry_->Lease(req).status().code(), absl::StatusCode::kCancelled) << id;
  }
  rel.set_lease_request_id("one-more");
  ASSERT_TRUE(registry_->Release(rel).ok());
  req.set_request_id("r0");  // now the oldest: forgotten
  auto late = registry_->Lease(req);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->tasks_size(), 1);
  req.set_request_id("r1");
  EXPECT_EQ(registry_->Lease(req).status().code(), absl::StatusCode::kCancelled);
}

// The release can overtake the call: a Lease whose request id was released takes nothing,
// whether it arrives after the release or is still waiting (long poll) when it comes.
TEST_F(LeaseRegistryTest, ReleasedRequestIdTakesNothing) {
  Start(LeaseRegistryOptions());
  v1::ReleaseRequest rel;
  rel.set_worker_id(worker_);
  rel.set_worker_secret(secret_);
  rel.set_lease_request_id("late");
  auto released = registry_->Release(rel);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->requeued(), 0);
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 10)), 2);
  v1::LeaseRequest req;
  req.set_worker_id(worker_);
  req.set_worker_secret(secret_);
  req.set_device_class(kDeviceClass);
  req.set_max_tasks(2);
  req.set_request_id("late");
  EXPECT_EQ(registry_->Lease(req).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(registry_->Queued(), 2);

  // Still waiting: the release wakes it and it answers Cancelled at once.
  ASSERT_EQ(Lease(2).tasks_size(), 2);  // empty the queue
  req.set_request_id("waiting");
  req.set_wait_ms(20000);
  const auto start = std::chrono::steady_clock::now();
  auto waiting = std::async(std::launch::async, [&] { return registry_->Lease(req); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  rel.set_lease_request_id("waiting");
  ASSERT_TRUE(registry_->Release(rel).ok());
  absl::StatusOr<v1::LeaseResponse> answered = waiting.get();
  EXPECT_EQ(answered.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_EQ(registry_->Enqueue(0, Tasks(1, 10, "after")), 1);
  EXPECT_EQ(registry_->Queued(), 1);

  // Request ids are per worker: another worker's release does not touch this one's call.
  v1::RegisterRequest other;
  other.set_hostname("host-b");
  other.add_devices()->set_device_class(kDeviceClass);
  auto b = registry_->Register(other);
  ASSERT_TRUE(b.ok()) << b.status();
  rel.set_worker_id(b->worker_id());
  rel.set_worker_secret(b->worker_secret());
  rel.set_lease_request_id("mine");
  ASSERT_TRUE(registry_->Release(rel).ok());
  req.set_request_id("mine");
  req.set_wait_ms(0);
  auto mine = registry_->Lease(req);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->tasks_size(), 1);
}

// Withdraw hands back the candidate ids it forgot (the search may propose them again) and
// never takes a re-timing task.
TEST_F(LeaseRegistryTest, WithdrawReturnsIdsAndSkipsRetimings) {
  Start(LeaseRegistryOptions());
  std::vector<v1::Task> retimes = Tasks(2, 10, "r");
  for (v1::Task& t : retimes) t.set_remeasure(true);
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 10)), 2);
  ASSERT_EQ(registry_->Enqueue(0, std::move(retimes)), 2);
  std::vector<std::string> withdrawn = registry_->Withdraw("job-1", 0, 10);
  EXPECT_EQ(withdrawn, (std::vector<std::string>{"c1", "c0"}));
  EXPECT_EQ(registry_->Queued(), 2);
  EXPECT_EQ(registry_->QueuedOf("job-1", 0), 2);
}

// A re-timing's result counts only from the lease that holds its task.
TEST_F(LeaseRegistryTest, CompleteOnlyFromTheHoldingLease) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 10)), 2);
  v1::LeaseResponse l = Lease(1);
  ASSERT_EQ(l.tasks_size(), 1);
  // Queued (c1) and a wrong lease (c0): nothing completes.
  auto none = registry_->Complete({"c0", "c1"}, std::string("lease-other"));
  EXPECT_EQ(none[0], nullptr);
  EXPECT_EQ(none[1], nullptr);
  auto done = registry_->Complete({"c0", "c1"}, l.lease_id());
  EXPECT_NE(done[0], nullptr);
  EXPECT_EQ(done[1], nullptr);
  EXPECT_EQ(registry_->Queued(), 1);
}

// A candidate whose result was just stored is not queued again (another job of the workload
// picked it in the same instant), unless as a re-timing of the stored record.
TEST_F(LeaseRegistryTest, CompletedCandidateIsNotQueuedAgainButCanBeRetimed) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 10)), 2);
  v1::LeaseResponse l = Lease(2);
  ASSERT_EQ(l.tasks_size(), 2);
  ASSERT_NE(registry_->Complete({"c0", "c1"})[0], nullptr);
  EXPECT_EQ(registry_->Enqueue(0, Tasks(3, 10)), 1);  // c2 only
  std::vector<v1::Task> retime = Tasks(1, 10);
  retime[0].set_remeasure(true);
  EXPECT_EQ(registry_->Enqueue(0, std::move(retime)), 1);
  EXPECT_EQ(registry_->Queued(), 2);
}

// StartLease (lathed's Lease on gRPC's callback API) holds no thread while it waits: each
// waiting call is answered on the thread that ends its wait, the oldest first, each exactly
// once; queued tasks go to a waiting call at once, not to the next poll.
class StartLeaseTest : public LeaseRegistryTest {
 protected:
  struct Answers {
    std::mutex mu;
    std::vector<std::pair<int, absl::StatusOr<v1::LeaseResponse>>> got;  // (call, answer)
    std::vector<std::thread::id> threads;
  };

  v1::LeaseRequest Request(int max_tasks, int wait_ms) {
    v1::LeaseRequest req;
    req.set_worker_id(worker_);
    req.set_worker_secret(secret_);
    req.set_device_class(kDeviceClass);
    req.set_max_tasks(max_tasks);
    req.set_wait_ms(wait_ms);
    return req;
  }

  uint64_t StartCall(int call, const v1::LeaseRequest& req) {
    return registry_->StartLease(req, [this, call](absl::StatusOr<v1::LeaseResponse> r) {
      std::lock_guard<std::mutex> lock(answers_.mu);
      answers_.got.emplace_back(call, std::move(r));
      answers_.threads.push_back(std::this_thread::get_id());
    });
  }

  size_t Answered() {
    std::lock_guard<std::mutex> lock(answers_.mu);
    return answers_.got.size();
  }

  Answers answers_;
};

TEST_F(StartLeaseTest, WaitingCallsAreServedOldestFirstOnTheQueueingThread) {
  Start(LeaseRegistryOptions());
  const uint64_t first = StartCall(0, Request(2, 60000));
  const uint64_t second = StartCall(1, Request(2, 60000));
  EXPECT_NE(first, 0u);
  EXPECT_NE(second, 0u);
  EXPECT_EQ(Answered(), 0u) << "nothing was queued: both calls wait";
  ASSERT_EQ(registry_->Enqueue(0, Tasks(3, 10)), 3);
  ASSERT_EQ(Answered(), 2u) << "Enqueue answers the waiting calls before it returns";
  EXPECT_EQ(registry_->Queued(), 0);
  std::lock_guard<std::mutex> lock(answers_.mu);
  ASSERT_TRUE(answers_.got[0].second.ok()) << answers_.got[0].second.status();
  ASSERT_TRUE(answers_.got[1].second.ok()) << answers_.got[1].second.status();
  EXPECT_EQ(answers_.got[0].first, 0) << "the oldest call is served first";
  EXPECT_EQ(answers_.got[0].second->tasks_size(), 2);
  EXPECT_EQ(answers_.got[0].second->tasks(0).candidate_id(), "c0");
  EXPECT_EQ(answers_.got[1].second->tasks_size(), 1);
  EXPECT_EQ(answers_.got[1].second->tasks(0).candidate_id(), "c2");
  EXPECT_FALSE(answers_.got[1].second->lease_id().empty());
  for (std::thread::id t : answers_.threads) EXPECT_EQ(t, std::this_thread::get_id());
}

TEST_F(StartLeaseTest, QueuedTasksAnswerAtOnce) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(1, 10)), 1);
  EXPECT_EQ(StartCall(0, Request(4, 60000)), 0u) << "answered at once: no waiting call";
  ASSERT_EQ(Answered(), 1u);
  std::lock_guard<std::mutex> lock(answers_.mu);
  ASSERT_TRUE(answers_.got[0].second.ok());
  EXPECT_EQ(answers_.got[0].second->tasks_size(), 1);
}

TEST_F(StartLeaseTest, CancelledCallTakesNothingAndIsAnsweredOnce) {
  Start(LeaseRegistryOptions());
  const uint64_t id = StartCall(0, Request(2, 60000));
  ASSERT_NE(id, 0u);
  registry_->CancelLease(id);
  ASSERT_EQ(Answered(), 1u);
  {
    std::lock_guard<std::mutex> lock(answers_.mu);
    EXPECT_EQ(answers_.got[0].second.status().code(), absl::StatusCode::kCancelled);
  }
  registry_->CancelLease(id);  // answered already: nothing
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 10)), 2);
  EXPECT_EQ(Answered(), 1u);
  EXPECT_EQ(registry_->Queued(), 2) << "a cancelled call took tasks";
}

TEST_F(StartLeaseTest, WaitEndsEmptyAfterWaitMsOrAtShutdown) {
  Start(LeaseRegistryOptions());
  StartCall(0, Request(1, 50));  // the reaper answers it when its 50 ms have passed
  StartCall(1, Request(1, 60000));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Answered() < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(Answered(), 1u);
  {
    std::lock_guard<std::mutex> lock(answers_.mu);
    EXPECT_EQ(answers_.got[0].first, 0);
    ASSERT_TRUE(answers_.got[0].second.ok());
    EXPECT_TRUE(answers_.got[0].second->lease_id().empty());
    EXPECT_EQ(answers_.got[0].second->tasks_size(), 0);
  }
  registry_->BeginShutdown();
  ASSERT_EQ(Answered(), 2u) << "shutting down answers every waiting call";
  std::lock_guard<std::mutex> lock(answers_.mu);
  ASSERT_TRUE(answers_.got[1].second.ok());
  EXPECT_TRUE(answers_.got[1].second->lease_id().empty());
}

// Tasks handed back (Release) go to a waiting call at once, front of the queue first.
TEST_F(StartLeaseTest, ReleasedTasksGoToAWaitingCall) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 10)), 2);
  v1::LeaseResponse held = Lease(2);
  ASSERT_EQ(held.tasks_size(), 2);
  StartCall(0, Request(1, 60000));
  EXPECT_EQ(Answered(), 0u);
  v1::ReleaseRequest rel;
  rel.set_worker_id(worker_);
  rel.set_worker_secret(secret_);
  rel.set_lease_id(held.lease_id());
  auto released = registry_->Release(rel);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(released->requeued(), 2);
  ASSERT_EQ(Answered(), 1u);
  std::lock_guard<std::mutex> lock(answers_.mu);
  ASSERT_TRUE(answers_.got[0].second.ok());
  ASSERT_EQ(answers_.got[0].second->tasks_size(), 1);
  EXPECT_EQ(answers_.got[0].second->tasks(0).candidate_id(), "c0");
  EXPECT_EQ(registry_->Queued(), 1);
}

}  // namespace
}  // namespace lathe::daemon
