// lathed's search threads (job_runner.h, daemon/search_pool.h): a job of several tasks searches
// more than one task at once, one round in flight per task, and workers are fed the rounds of
// the other tasks while one task's search is held. Real gRPC server, real SQLite file, a fake
// worker over real gRPC clients; the rounds run on a NicedSearchPool that the test watches.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "daemon/search_pool.h"
#include "service_fixture.h"

namespace lathe::daemon::service_testing {
namespace {

// A search pool that holds the first round it is given until Release(), and counts the rounds
// started and the most in flight at once.
class HoldingPool : public tuner::SearchPool {
 public:
  explicit HoldingPool(int threads) : pool_(threads, 0) {}
  ~HoldingPool() override { Release(); }

  bool TryReserve() override { return pool_.TryReserve(); }
  void Run(std::function<void(int threads)> fn) override {
    bool hold;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold = runs_++ == 0;
    }
    pool_.Run([this, hold, fn = std::move(fn)](int threads) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++in_flight_;
        max_in_flight_ = std::max(max_in_flight_, in_flight_);
        held_ = held_ || hold;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !hold || released_; });
      }
      fn(threads);
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      if (hold) held_ = false;
      cv_.notify_all();
    });
  }

  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return held_; });
  }
  bool held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  int max_in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int runs_ = 0;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  bool held_ = false;
  bool released_ = false;
  NicedSearchPool pool_;  // last: its threads are joined before the members they use go
};

class ServiceSearchThreadsTest : public ServiceTest {
 protected:
  // The service is stopped (TearDown) before the fixture, and so the pool, goes.
  template <typename Pool, typename... Args>
  Pool& MakePool(Args... args) {
    auto p = std::make_unique<Pool>(args...);
    Pool& ref = *p;
    pool_ = std::move(p);
    return ref;
  }
  std::unique_ptr<tuner::SearchPool> pool_;

  // The three tasks, of one weight each.
  std::string SubmitTasks(int budget, int batch) {
    return ServiceTest::SubmitTasks(budget, batch, nullptr, {{kSpec, 1}, {kSpecB, 1}, {kSpecC, 1}});
  }
};

// While the job's first round (one task's search) is held, the other tasks are searched on
// the other threads and their rounds are leased; once it is let go the job completes its
// budget with every candidate measured once.
TEST_F(ServiceSearchThreadsTest, OtherTasksAreLeasedWhileOneTasksSearchIsHeld) {
  HoldingPool& pool = MakePool<HoldingPool>(4);
  ServiceOptions o = Options();
  o.search_pool = &pool;
  StartServer(o);
  const std::string job = SubmitTasks(48, 8);
  const std::string w = RegisterWorker("host-a");
  ASSERT_TRUE(pool.WaitHeld());

  std::set<std::string> workloads_while_held;
  std::vector<std::string> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (workloads_while_held.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    v1::LeaseResponse l = Lease(w, 4, 200);
    for (const v1::Task& t : l.tasks()) {
      workloads_while_held.insert(t.request().workload());
      seen.push_back(t.candidate_id());
    }
    if (l.tasks_size() > 0) Report(OkReport(w, l));
  }
  EXPECT_TRUE(pool.held()) << "the first round is still held";
  EXPECT_EQ(workloads_while_held.size(), 2u)
      << "the two tasks not held were searched and leased meanwhile";
  EXPECT_GE(pool.max_in_flight(), 2) << "searches of several tasks in flight at once";

  pool.Release();
  RunWorker(w, job, &seen);
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::DONE);
  EXPECT_EQ(st.trials_done(), 48);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size())
      << "no candidate leased twice";
  EXPECT_EQ(StoredRecords(), 48);
  for (const v1::WorkloadProgress& p : st.workloads()) {
    EXPECT_GE(p.trials_done(), 1) << p.workload();
  }
}

// One search thread: the rounds are searched one at a time, and the job still completes.
TEST_F(ServiceSearchThreadsTest, OneSearchThreadSearchesOneRoundAtATime) {
  NicedSearchPool& pool = MakePool<NicedSearchPool>(1, 0);
  ServiceOptions o = Options();
  o.search_pool = &pool;
  StartServer(o);
  const std::string job = SubmitTasks(32, 8);
  std::vector<std::string> seen;
  RunWorker(RegisterWorker("host-a"), job, &seen);
  EXPECT_EQ(Job(job).state(), v1::DONE);
  EXPECT_EQ(Job(job).trials_done(), 32);
  EXPECT_EQ(pool.max_running(), 1);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
}

// Two jobs at once share the search threads: both complete.
TEST_F(ServiceSearchThreadsTest, TwoJobsSearchOnTheSharedThreads) {
  NicedSearchPool& pool = MakePool<NicedSearchPool>(2, 0);
  ServiceOptions o = Options();
  o.search_pool = &pool;
  StartServer(o);
  const std::string a = SubmitTasks(24, 8);
  const std::string b = Submit(16, 8);
  const std::string w = RegisterWorker("host-a");
  std::set<std::string> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while ((Job(a).state() != v1::DONE || Job(b).state() != v1::DONE) &&
         std::chrono::steady_clock::now() < deadline) {
    v1::LeaseResponse l = Lease(w, 4, 200);
    for (const v1::Task& t : l.tasks()) EXPECT_TRUE(seen.insert(t.candidate_id()).second);
    if (l.tasks_size() > 0) Report(OkReport(w, l));
  }
  EXPECT_EQ(Job(a).state(), v1::DONE);
  EXPECT_EQ(Job(b).state(), v1::DONE);
  EXPECT_EQ(Job(a).trials_done(), 24);
  EXPECT_EQ(Job(b).trials_done(), 16);
  EXPECT_LE(pool.max_running(), 2);
}

}  // namespace
}  // namespace lathe::daemon::service_testing
