// End-to-end: a real lathed with real lathe-worker processes on loopback completes jobs,
// also when a worker is killed, frozen or fed crashing, hanging and wrong candidates, and
// when the daemon itself is killed and restarted on the same database. Every test checks
// the database afterwards: as many records as trials, no candidate stored twice.
#include <grpcpp/grpcpp.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ir/workload.h"
#include "lathe/v1/service.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/worker_proxy.h"
#include "tests/measure/fault_plan.h"

namespace lathe::e2e {
namespace {

constexpr char kWorkload[] = "matmul:m=32,n=32,k=32";

std::string Key() { return ir::WorkloadKey(ir::MakeWorkload(kWorkload)->canonical); }

// Short leases and heartbeats, so that a dead or frozen worker's tasks come back quickly.
const std::vector<std::string> kFastLeases = {"--heartbeat-ms", "300", "--lease-ms", "1500"};

void ExpectNoLossNoDuplicate(const Cluster& c, int trials) {
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_EQ(n.records, trials) << "records of the workload in the database";
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
}

TEST(ClusterTest, DaemonAndTwoWorkersCompleteAJobThroughTheCli) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon());
  ASSERT_NE(c.StartWorker(), nullptr);
  ASSERT_NE(c.StartWorker(), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 2));

  const std::string lathe = LATHE_BIN;
  auto [rc, out] = RunCommand(lathe + " tune --tuner " + c.address() + " --workload " + kWorkload +
                              " --trials 32 --batch 16 --min-repeat-ms 2 --seed 3 --no-baseline "
                              "--json 2>" +
                              c.dir() + "/tune.err");
  ASSERT_EQ(rc, 0) << out << ReadAll(c.dir() + "/tune.err");
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["workload"], ir::MakeWorkload(kWorkload)->canonical);
  EXPECT_EQ(j["trials"], 32);
  EXPECT_EQ(j["state"], "done");
  EXPECT_GT(j["best_gflops"].get<double>(), 0);
  EXPECT_GT(j["best_latency_us"].get<double>(), 0);
  EXPECT_TRUE(j["errors"].is_object());
  EXPECT_FALSE(j["device_class"].get<std::string>().empty());
  // The progress went to stderr.
  EXPECT_NE(ReadAll(c.dir() + "/tune.err").find("trials"), std::string::npos);
  ExpectNoLossNoDuplicate(c, 32);

  // Both workers measured; the CLI lists them and the job.
  auto [wrc, wout] = RunCommand(lathe + " workers --json --tuner " + c.address());
  ASSERT_EQ(wrc, 0) << wout;
  nlohmann::json w = nlohmann::json::parse(wout, nullptr, false);
  ASSERT_TRUE(w["workers"].is_array()) << wout;
  ASSERT_EQ(w["workers"].size(), 2u) << wout;
  int64_t measured = 0;
  for (const auto& x : w["workers"]) {
    EXPECT_FALSE(x["id"].get<std::string>().empty());
    EXPECT_EQ(x["device_class"], j["device_class"]);
    EXPECT_TRUE(x["state"] == "idle" || x["state"] == "busy") << x;
    measured += x["measured"].get<int64_t>();
    EXPECT_GT(x["measured"].get<int64_t>(), 0) << "a worker measured nothing: " << wout;
  }
  EXPECT_GE(measured, 32);
  auto [jrc, jout] = RunCommand(lathe + " jobs --json --tuner " + c.address());
  ASSERT_EQ(jrc, 0) << jout;
  nlohmann::json jobs = nlohmann::json::parse(jout, nullptr, false);
  ASSERT_EQ(jobs["jobs"].size(), 1u) << jout;
  EXPECT_EQ(jobs["jobs"][0]["id"], j["job_id"]);
  EXPECT_EQ(jobs["jobs"][0]["state"], "done");

  // lathe query --tuner prints what the local query prints from the same database.
  auto [qrc, qout] =
      RunCommand(lathe + " query --json --tuner " + c.address() + " --workload " + kWorkload +
                 " --device-class '" + j["device_class"].get<std::string>() + "'");
  ASSERT_EQ(qrc, 0) << qout;
  auto [lrc, lout] =
      RunCommand(lathe + " query --json --db " + c.db() + " --workload " + kWorkload +
                 " --device-class '" + j["device_class"].get<std::string>() + "'");
  ASSERT_EQ(lrc, 0) << lout;
  nlohmann::json q = nlohmann::json::parse(qout, nullptr, false);
  nlohmann::json l = nlohmann::json::parse(lout, nullptr, false);
  for (const char* field :
       {"workload", "device_class", "latency_us", "trace", "measured_at", "worker"}) {
    EXPECT_EQ(q[field], l[field]) << field;
  }
  EXPECT_NEAR(q["gflops"].get<double>(), l["gflops"].get<double>(), 1e-6);
  EXPECT_NEAR(q["latency_us"].get<double>(), j["best_latency_us"].get<double>(), 1e-9);
  // A miss is exit 3, as locally.
  auto [mrc, mout] = RunCommand(lathe + " query --tuner " + c.address() +
                                " --workload matmul:m=3,n=5,k=7 2>/dev/null");
  EXPECT_EQ(mrc, 3) << mout;
}

// The end of a job re-times its best records for longer (lathed --remeasure-top, default 5):
// once the job is DONE, its best few records carry the re-timing (remeasured_at set), and the
// re-timing added repeats, not records.
TEST(ClusterTest, CompletedJobsBestRecordsAreRetimed) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon(kFastLeases));
  ASSERT_NE(c.StartWorker(), nullptr);
  ASSERT_NE(c.StartWorker(), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 2));
  absl::StatusOr<std::string> id = client->SubmitJob(SmallJob(kWorkload, 24, 12));
  ASSERT_TRUE(id.ok()) << id.status();
  bool saw_retiming = false;
  absl::StatusOr<lathe::v1::JobStatus> done =
      WaitForJob(*client, *id, 120, [&](const lathe::v1::JobStatus& s) {
        if (s.workloads_size() > 0 && s.workloads(0).remeasure_pending() > 0) {
          saw_retiming = true;
          EXPECT_EQ(s.state(), lathe::v1::RUNNING);
          EXPECT_EQ(TrialsDone(s), 24);
        }
      });
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_TRUE(saw_retiming) << "the job's progress never showed the re-timing";
  const lathe::v1::WorkloadProgress& wp = done->workloads(0);
  EXPECT_EQ(wp.remeasure_pending(), 0);
  EXPECT_GE(wp.remeasured(), 1);
  ExpectNoLossNoDuplicate(c, 24);

  db::OpenOptions o;
  o.create_if_missing = false;
  auto d = db::Database::Open(c.db(), o);
  ASSERT_TRUE(d.ok()) << d.status();
  auto top = (*d)->TopK(Key(), done->device_class(), 5);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_FALSE(top->empty());
  int not_retimed = 0;
  for (const db::Record& r : *top) not_retimed += r.remeasured_at_ms == 0 ? 1 : 0;
  // A re-timing that failed leaves its record as it was; every other one of the best is
  // re-timed.
  EXPECT_LE(not_retimed, wp.remeasure_failed()) << "of the best " << top->size();
  if (wp.remeasure_failed() == 0) {
    EXPECT_GT(top->front().remeasured_at_ms, 0);
  }
  EXPECT_NEAR(top->front().median_us, wp.best_latency_us(), 1e-9);
  EXPECT_NE(ReadAll(c.dir() + "/lathed.0.log").find("event=remeasured"), std::string::npos);
}

// The tasks of a lease, by candidate id.
std::set<std::string> Candidates(const lathe::v1::LeaseResponse& lease) {
  std::set<std::string> ids;
  for (const lathe::v1::Task& t : lease.tasks()) ids.insert(t.candidate_id());
  return ids;
}

// Every candidate in `ids` is stored, measured by someone other than `worker_id`.
void ExpectMeasuredElsewhere(const Cluster& c, const std::set<std::string>& ids,
                             const std::string& worker_id) {
  ASSERT_FALSE(ids.empty());
  db::OpenOptions o;
  o.create_if_missing = false;
  auto d = db::Database::Open(c.db(), o);
  ASSERT_TRUE(d.ok()) << d.status();
  for (const std::string& id : ids) {
    absl::StatusOr<std::optional<db::Record>> r = (*d)->GetByCandidateId(id);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->has_value()) << "the task " << id << " of the lost lease was never measured";
    EXPECT_NE((*r)->worker.rfind(worker_id + "@", 0), 0u)
        << id << " is stored as measured by the dead worker: " << (*r)->worker;
  }
}

TEST(ClusterTest, KilledWorkerLosesNoResult) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon(kFastLeases));
  // The victim is killed the moment its third lease comes back to it, so that it dies
  // holding tasks it will never report.
  Process* victim = nullptr;
  std::set<std::string> lost;
  WorkerProxy proxy(c.address(), [&](int n, lathe::v1::LeaseResponse* lease) {
    if (n == 3 && victim != nullptr) {
      victim->Signal(SIGKILL);
      lost = Candidates(*lease);
    }
  });
  ASSERT_TRUE(proxy.ok());
  victim = c.StartWorker({"--batch", "4"}, {}, proxy.address());
  ASSERT_NE(victim, nullptr);
  ASSERT_NE(c.StartWorker({"--batch", "4"}), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 2));
  absl::StatusOr<std::string> id = client->SubmitJob(SmallJob(kWorkload, 48, 16));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 150);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(victim->Wait(5000).has_value()) << "the victim was never killed";
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 48);
  ExpectNoLossNoDuplicate(c, 48);
  ExpectMeasuredElsewhere(c, lost, proxy.worker_id());
}

// A lease's report larger than the daemon takes (here a proxy that refuses messages over
// 12 KiB stands for lathed's 4 MiB limit and a lease of 1024 tasks): the worker sends it in
// parts instead of retrying it whole and spooling it forever.
TEST(ClusterTest, OversizedReportIsSentInParts) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon(kFastLeases));
  WorkerProxy proxy(c.address(), nullptr, /*max_receive_bytes=*/12 << 10);
  ASSERT_TRUE(proxy.ok());
  ASSERT_NE(c.StartWorker({"--batch", "8"}, {}, proxy.address()), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));
  // 50 ms per candidate: each result keeps hundreds of repeats (8 bytes each, at most 1000),
  // so the 8 results of a lease take well over 12 KiB and any one of them fits.
  lathe::v1::JobSpec spec = SmallJob(kWorkload, 8, 8);
  spec.set_min_repeat_ms(50);
  absl::StatusOr<std::string> id = client->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 90);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 8);
  ExpectNoLossNoDuplicate(c, 8);
  EXPECT_GT(proxy.reports(), proxy.leases()) << "no lease's results were sent in parts";
  const std::string log = ReadAll(c.dir() + "/worker0.log");
  EXPECT_NE(log.find("sending halves"), std::string::npos) << log;
  EXPECT_EQ(log.find("dropping them"), std::string::npos) << log;
}

// Ctrl-C on `lathe tune --tuner`: detaches (the job keeps running), or cancels the job with
// --cancel-on-interrupt.
TEST(ClusterTest, InterruptedRemoteTuneDetachesOrCancels) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon());
  ASSERT_NE(c.StartWorker(), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));
  for (bool cancel : {false, true}) {
    SCOPED_TRACE(cancel ? "--cancel-on-interrupt" : "detach");
    const std::string log = c.dir() + (cancel ? "/tune-cancel.log" : "/tune-detach.log");
    std::vector<std::string> argv = {LATHE_BIN,         "tune",    "--tuner",      c.address(),
                                     "--workload",      kWorkload, "--trials",     "100000",
                                     "--min-repeat-ms", "2",       "--no-baseline"};
    if (cancel) argv.push_back("--cancel-on-interrupt");
    auto tune = Process::Spawn(argv, {}, log);
    ASSERT_NE(tune, nullptr);
    // Interrupt once the job is measuring.
    std::string job_id;
    for (auto until = Clock::now() + std::chrono::seconds(60); Clock::now() < until;) {
      absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = client->ListJobs();
      ASSERT_TRUE(jobs.ok()) << jobs.status();
      for (const auto& j : *jobs) {
        if (j.state() == lathe::v1::RUNNING && TrialsDone(j) >= 2) job_id = j.job_id();
      }
      if (!job_id.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(job_id.empty()) << ReadAll(log);
    tune->Signal(SIGINT);
    std::optional<int> rc = tune->Wait(20000);
    ASSERT_TRUE(rc.has_value()) << "lathe tune did not end on Ctrl-C: " << ReadAll(log);
    EXPECT_EQ(*rc, 0) << ReadAll(log);
    const std::string text = ReadAll(log);
    absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = client->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    lathe::v1::JobState state = lathe::v1::JOB_STATE_UNSPECIFIED;
    for (const auto& j : *jobs) {
      if (j.job_id() == job_id) state = j.state();
    }
    if (cancel) {
      EXPECT_NE(text.find("cancelled job " + job_id), std::string::npos) << text;
      EXPECT_EQ(state, lathe::v1::CANCELLED);
    } else {
      EXPECT_NE(text.find("keeps running"), std::string::npos) << text;
      EXPECT_EQ(state, lathe::v1::RUNNING);
      ASSERT_TRUE(client->Cancel(job_id).ok());  // make room for the next one
    }
  }
  // Nothing was stored twice in all this.
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_EQ(n.distinct_candidates, n.records);
}

TEST(ClusterTest, KilledDaemonResumesTheJobOnRestart) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon(kFastLeases));
  const std::string address = c.address();
  ASSERT_NE(c.StartWorker(), nullptr);
  ASSERT_NE(c.StartWorker(), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 2));
  absl::StatusOr<std::string> id = client->SubmitJob(SmallJob(kWorkload, 48, 16));
  ASSERT_TRUE(id.ok()) << id.status();
  bool restarted = false;
  int seen_after_restart = 0;
  // The same Watch follows the job across the restart (the client re-opens the stream).
  absl::StatusOr<lathe::v1::JobStatus> done =
      WaitForJob(*client, *id, 200, [&](const lathe::v1::JobStatus& s) {
        if (restarted) ++seen_after_restart;
        if (!restarted && TrialsDone(s) >= 8 && !lathe::client::IsFinal(s.state())) {
          c.daemon()->Signal(SIGKILL);
          c.daemon()->Wait(10000);
          restarted = c.StartDaemon(kFastLeases, address);
        }
      });
  ASSERT_TRUE(restarted);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_GT(seen_after_restart, 0);
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 48);
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_GE(n.records, 48);
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
  // The restarted daemon knows the job from the database.
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].job_id(), *id);
}

TEST(ClusterTest, FrozenWorkersLeaseExpiresAndItsWorkMovesOn) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon(kFastLeases));
  // The frozen worker is stopped (SIGSTOP) the moment its second lease comes back to it: it
  // holds tasks, sends no heartbeat, and its connection stays open.
  Process* frozen = nullptr;
  std::set<std::string> held;
  WorkerProxy proxy(c.address(), [&](int n, lathe::v1::LeaseResponse* lease) {
    if (n == 2 && frozen != nullptr) {
      frozen->Signal(SIGSTOP);
      held = Candidates(*lease);
    }
  });
  ASSERT_TRUE(proxy.ok());
  frozen = c.StartWorker({"--batch", "4"}, {}, proxy.address());
  ASSERT_NE(frozen, nullptr);
  ASSERT_NE(c.StartWorker({"--batch", "4"}), nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 2));
  absl::StatusOr<std::string> id = client->SubmitJob(SmallJob(kWorkload, 40, 16));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 150);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 40);
  ASSERT_FALSE(held.empty()) << "the worker was never frozen";
  ExpectMeasuredElsewhere(c, held, proxy.worker_id());
  // The frozen worker is reported lost (3 heartbeats of 300 ms).
  bool lost = false;
  for (auto until = Clock::now() + std::chrono::seconds(10); !lost && Clock::now() < until;) {
    absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client->ListWorkers();
    ASSERT_TRUE(ws.ok()) << ws.status();
    for (const auto& w : *ws) lost |= w.worker_id() == proxy.worker_id() && w.state() == "lost";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(lost) << "the frozen worker is not reported lost";
  // Thawed, it reports its stale results: stored once, never twice.
  frozen->Signal(SIGCONT);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  DbCount n = CountRecords(c.db(), Key());
  EXPECT_EQ(n.records, 40);
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
}

TEST(ClusterTest, CrashingHangingAndWrongCandidatesAreRecordedAndTheJobCompletes) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon(kFastLeases));
  // The third, fifth and seventh task handed out crash, answer wrongly and hang.
  std::map<std::string, std::string> faulted;  // candidate id -> fault
  test_support::FaultPlan plan;
  int handed = 0;
  WorkerProxy proxy(c.address(), [&](int, lathe::v1::LeaseResponse* lease) {
    for (lathe::v1::Task& t : *lease->mutable_tasks()) {
      ++handed;
      const char* fault = handed == 3 ? "crash" : handed == 5 ? "wrong" : handed == 7 ? "hang" : "";
      if (*fault == '\0') continue;
      plan.Add(t.request().candidate_id(), fault);
      faulted[t.candidate_id()] = fault;
    }
  });
  ASSERT_TRUE(proxy.ok());
  // The measurement child inherits the plan's LATHE_TEST_FAULTS from the worker.
  Process* worker =
      c.StartWorker({"--timeout-s", "2", "--batch", "2"}, {plan.Env()}, proxy.address());
  ASSERT_NE(worker, nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));
  absl::StatusOr<std::string> id = client->SubmitJob(SmallJob(kWorkload, 24, 12));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *id, 150);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  EXPECT_EQ(TrialsDone(*done), 24);

  ASSERT_EQ(faulted.size(), 3u);
  // Each faulted candidate is stored with its error class; the rest are ok or failed on their
  // own merits. The worker survived the crash and the hang (its child was replaced).
  db::OpenOptions o;
  o.create_if_missing = false;
  auto d = db::Database::Open(c.db(), o);
  ASSERT_TRUE(d.ok()) << d.status();
  const std::map<std::string, db::ErrorClass> expected = {{"crash", db::ErrorClass::kRuntimeError},
                                                          {"wrong", db::ErrorClass::kWrongAnswer},
                                                          {"hang", db::ErrorClass::kTimeout}};
  for (const auto& [cand, fault] : faulted) {
    absl::StatusOr<std::optional<db::Record>> r = (*d)->GetByCandidateId(cand);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->has_value()) << "no record of the '" << fault << "' candidate " << cand;
    EXPECT_EQ((*r)->error_class, expected.at(fault))
        << fault << ": " << db::ErrorClassName((*r)->error_class) << " " << (*r)->error_msg;
  }
  int errors = 0;
  for (const auto& [cls, n] : done->workloads(0).errors()) errors += n;
  EXPECT_GE(errors, 3);
  EXPECT_TRUE(worker->running()) << "the worker did not survive its children's faults";
  ExpectNoLossNoDuplicate(c, 24);
}

}  // namespace
}  // namespace lathe::e2e
