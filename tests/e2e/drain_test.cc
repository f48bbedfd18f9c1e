// End-to-end: a worker stopped with SIGTERM hands its unstarted tasks back at once (Release),
// also those of a lease whose answer was still on its way to it, and results a worker kept in its
// spool while the daemon was down count for the resumed job after the daemon restarts. Real lathed
// and lathe-worker processes on loopback.
#include <string>
#include <vector>

#include "ir/workload.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/worker_proxy.h"

namespace lathe::e2e {
namespace {

constexpr char kWorkload[] = "matmul:m=32,n=32,k=32";

std::string Key() { return ir::WorkloadKey(ir::MakeWorkload(kWorkload)->canonical); }

// Waits until `text` appears in the file at `path`.
bool WaitForText(const std::string& path, const std::string& text, int timeout_ms) {
  for (auto until = Clock::now() + std::chrono::milliseconds(timeout_ms); Clock::now() < until;) {
    if (ReadAll(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits until some worker is "busy" (holds a lease with unreported tasks).
bool WaitForBusyWorker(client::TunerClient& client, int timeout_ms) {
  for (auto until = Clock::now() + std::chrono::milliseconds(timeout_ms); Clock::now() < until;) {
    absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client.ListWorkers();
    if (ws.ok()) {
      for (const auto& w : *ws) {
        if (w.state() == "busy") return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(DrainTest, SigtermedWorkerHandsBackItsUnstartedTasksAtOnce) {
  Cluster c;
  // Leases live 120 s (the default): without Release, the stopped worker's tasks would wait
  // that long for another worker.
  // No re-timing at the end: its 1.5 s tasks would only lengthen what is tested here.
  ASSERT_TRUE(c.StartDaemon({"--heartbeat-ms", "300", "--remeasure-top", "0"}));
  Process* a = c.StartWorker({"--batch", "8"});
  ASSERT_NE(a, nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));
  lathe::v1::JobSpec spec = SmallJob(kWorkload, 12, 12);
  spec.set_min_repeat_ms(300);  // a lease of 8 takes >= 2.4 s
  absl::StatusOr<std::string> id = client->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForBusyWorker(*client, 30000)) << "the worker never leased";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto stopped_at = Clock::now();
  a->Signal(SIGTERM);
  std::optional<int> rc = a->Wait(30000);
  ASSERT_TRUE(rc.has_value()) << "the worker did not exit after SIGTERM";
  EXPECT_EQ(*rc, 0);
  ASSERT_TRUE(WaitForText(c.dir() + "/worker0.log", "handed back", 1000))
      << "the worker did not hand its unstarted tasks back";

  ASSERT_NE(c.StartWorker({"--batch", "8"}), nullptr);
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 90);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 12);
  // Well before the 120 s lease could have expired.
  EXPECT_LT(Clock::now() - stopped_at, std::chrono::seconds(90));
  const std::string log = ReadAll(c.dir() + "/lathed.0.log");
  EXPECT_EQ(log.find("event=lease_expired"), std::string::npos);
  // The daemon put the tasks back in the queue (requeued=N, N > 0).
  const size_t released = log.find("event=lease_released");
  ASSERT_NE(released, std::string::npos) << log;
  const size_t n_at = log.find("requeued=", released);
  ASSERT_NE(n_at, std::string::npos);
  EXPECT_GT(std::atoi(log.c_str() + n_at + 9), 0) << log.substr(released, 200);
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_EQ(n.records, 12);
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
}

TEST(DrainTest, SpooledResultsCountForTheResumedJobAfterTheDaemonRestarts) {
  Cluster c;
  const std::vector<std::string> flags = {"--heartbeat-ms",  "300", "--lease-ms", "1500",
                                          "--remeasure-top", "0"};
  ASSERT_TRUE(c.StartDaemon(flags));
  const std::string address = c.address();
  ASSERT_NE(c.StartWorker({"--batch", "6"}), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));
  lathe::v1::JobSpec spec = SmallJob(kWorkload, 12, 12);
  spec.set_seed(0);             // the resumed job draws other candidates than the first run
  spec.set_min_repeat_ms(300);  // a lease of 6 takes >= 1.8 s
  absl::StatusOr<std::string> id = client->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForBusyWorker(*client, 30000)) << "the worker never leased";
  c.daemon()->Signal(SIGKILL);
  c.daemon()->Wait(10000);
  // The worker finishes its lease, cannot report it and keeps it in its spool.
  ASSERT_TRUE(WaitForText(c.dir() + "/worker0.log", "until the tuner is back", 60000))
      << "the worker did not spool its results";
  ASSERT_TRUE(c.StartDaemon(flags, address));
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 120);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 12);
  ASSERT_TRUE(WaitForText(c.dir() + "/lathed.1.log", "event=report_restored", 10000))
      << "the spooled results were not stored by the restarted daemon";
  const std::string log = ReadAll(c.dir() + "/lathed.1.log");
  EXPECT_EQ(log.find("event=report_rejected"), std::string::npos);
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_GE(n.records, 12);
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
}

// The answer to the worker's Lease call is on its way (held back by a proxy) when the worker
// is stopped: the daemon granted the lease, the worker never sees it. The worker releases it
// by the call's request id, so its tasks go to another worker at once, not after the 120 s
// lease.
TEST(DrainTest, LeaseWhoseAnswerWasInFlightAtSigtermIsHandedBack) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon({"--heartbeat-ms", "300", "--remeasure-top", "0"}));
  Process* a = nullptr;
  int held = 0;
  WorkerProxy proxy(c.address(), [&](int n, lathe::v1::LeaseResponse* lease) {
    if (n != 1 || a == nullptr) return;
    held = lease->tasks_size();
    a->Signal(SIGTERM);
    // The answer waits until the worker has given up on the call.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  });
  ASSERT_TRUE(proxy.ok());
  a = c.StartWorker({"--batch", "8"}, {}, proxy.address());
  ASSERT_NE(a, nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));
  absl::StatusOr<std::string> id = client->SubmitJob(SmallJob(kWorkload, 12, 12));
  ASSERT_TRUE(id.ok()) << id.status();
  std::optional<int> rc = a->Wait(30000);
  ASSERT_TRUE(rc.has_value()) << "the worker did not exit after SIGTERM";
  EXPECT_EQ(*rc, 0);
  ASSERT_EQ(held, 8) << "the proxy never held a lease back";
  const auto stopped_at = Clock::now();

  ASSERT_NE(c.StartWorker({"--batch", "8"}), nullptr);
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 90);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 12);
  EXPECT_LT(Clock::now() - stopped_at, std::chrono::seconds(60));
  const std::string log = ReadAll(c.dir() + "/lathed.0.log");
  EXPECT_EQ(log.find("event=lease_expired"), std::string::npos);
  EXPECT_NE(log.find("requeued=8 by_request_id=1"), std::string::npos) << log;
  EXPECT_NE(ReadAll(c.dir() + "/worker0.log").find("whose answer never arrived"),
            std::string::npos);
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_EQ(n.records, 12);
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
}

}  // namespace
}  // namespace lathe::e2e
