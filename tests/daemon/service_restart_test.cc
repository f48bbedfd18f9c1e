// The daemon's service across a restart (a new TunerService on the same SQLite file), with the
// fixture of service_fixture.h: a job resumes where it stopped without measuring a candidate
// twice; results a worker reports for the previous daemon's leases count for the resumed job,
// never past its target, and are kept once it has ended; a job resumes with its own trials
// when another job shared its workload.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "db/database.h"
#include "tests/daemon/service_fixture.h"

namespace lathe::daemon {
namespace {

using service_testing::kDeviceClass;
using service_testing::kSpec;
using service_testing::ServiceTest;
namespace v1 = lathe::v1;

TEST_F(ServiceTest, RestartResumesJobWithoutMeasuringTwice) {
  StartServer(Options());
  const std::string job = Submit(16, 8);
  std::string w = RegisterWorker("host-a");
  std::vector<std::string> seen;
  RunWorker(w, job, &seen, 4, /*max_reports=*/2);
  ASSERT_EQ(seen.size(), 8u);
  // A lease in flight when the daemon dies is simply lost with it.
  v1::LeaseResponse lost = Lease(w, 2);
  EXPECT_EQ(lost.tasks_size(), 2);
  StopServer();
  EXPECT_EQ(StoredRecords(), 8);

  StartServer(Options());
  EXPECT_EQ(Job(job).workloads(0).trials_done(), 8);
  {
    // The worker's heartbeat tells it to register again.
    v1::HeartbeatRequest hb;
    hb.set_worker_id(w);
    hb.set_worker_secret(Secret(w));
    v1::HeartbeatResponse resp;
    ASSERT_TRUE(worker_->Heartbeat(Ctx().get(), hb, &resp).ok());
    EXPECT_TRUE(resp.reregister());
  }
  w = RegisterWorker("host-a");
  RunWorker(w, job, &seen);
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::DONE);
  EXPECT_EQ(st.workloads(0).trials_done(), 16);
  EXPECT_EQ(StoredRecords(), 16);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
}

TEST_F(ServiceTest, ResultsKeptAcrossARestartCountForTheResumedJobWithTheirTasks) {
  ServiceOptions o = Options();
  StartServer(o);
  // seed 0: the resumed job draws other candidates than the first run, so the results below
  // are for candidates the restarted daemon does not hold.
  const std::string job = Submit(6, 6, /*seed=*/0);
  ASSERT_FALSE(job.empty());
  std::string w = RegisterWorker("host-a");
  v1::LeaseResponse kept = Lease(w, 6, 10000);
  ASSERT_EQ(kept.tasks_size(), 6);
  StopServer();  // the worker measured the lease meanwhile and spooled its results

  StartServer(o);
  w = RegisterWorker("host-a");
  // What the resumed job dispatched: those ids are held again and would not test the restore.
  std::set<std::string> redispatched;
  for (v1::LeaseResponse l = Lease(w, 64, 2000); l.tasks_size() > 0; l = Lease(w, 64, 200)) {
    for (const v1::Task& t : l.tasks()) redispatched.insert(t.candidate_id());
  }
  v1::LeaseResponse restorable;
  for (const v1::Task& t : kept.tasks()) {
    if (redispatched.count(t.candidate_id()) == 0) *restorable.add_tasks() = t;
  }
  ASSERT_GE(restorable.tasks_size(), 3) << "the resumed job drew the same candidates";
  const int before = Job(job).workloads(0).trials_done();

  // 1. Without their tasks they cannot be stored: rejected, not an error.
  v1::LeaseResponse one = restorable;
  one.mutable_tasks()->DeleteSubrange(1, one.tasks_size() - 1);
  v1::ReportResponse r = Report(OkReport(w, one));
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.rejected(), 1);
  // 2. A task whose trace does not give the candidate id is rejected too.
  v1::ReportRequest forged = OkReport(w, one);
  v1::Task bad = one.tasks(0);
  bad.mutable_request()->set_trace(restorable.tasks(1).request().trace());
  *forged.add_tasks() = bad;
  r = Report(forged);
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.rejected(), 1);
  // 3. With their tasks they are stored and count for the resumed job.
  v1::ReportRequest req = OkReport(w, restorable);
  for (const v1::Task& t : restorable.tasks()) *req.add_tasks() = t;
  r = Report(req);
  EXPECT_EQ(r.accepted(), restorable.tasks_size());
  EXPECT_EQ(r.rejected(), 0);
  EXPECT_EQ(Job(job).workloads(0).trials_done(), before + restorable.tasks_size());
  // A retry is a duplicate, counted once.
  r = Report(req);
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.duplicates(), restorable.tasks_size());
  EXPECT_EQ(Job(job).workloads(0).trials_done(), before + restorable.tasks_size());
  // 4. A task of a job this daemon does not run is rejected cleanly.
  v1::LeaseResponse other = Lease(w, 1, 0);  // nothing queued any more
  EXPECT_EQ(other.tasks_size(), 0);
  v1::ReportRequest stray = OkReport(w, one);
  stray.mutable_results(0)->set_candidate_id("stray");
  v1::Task t = one.tasks(0);
  t.set_candidate_id("stray");
  t.set_job_id("job-unknown");
  *stray.add_tasks() = t;
  r = Report(stray);
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.rejected(), 1);
  StopServer();
  auto database = db::Database::Open(db_path_);
  ASSERT_TRUE(database.ok()) << database.status();
  for (const v1::Task& t : restorable.tasks()) {
    auto rec = (*database)->GetByCandidateId(t.candidate_id());
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_TRUE(rec->has_value()) << t.candidate_id() << " was not stored";
  }
  auto stray_rec = (*database)->GetByCandidateId("stray");
  ASSERT_TRUE(stray_rec.ok());
  EXPECT_FALSE(stray_rec->has_value());
}

// The race of the resumed job and a worker's spool (DrainTest's flake): the restarted daemon
// dispatches the job's missing trials anew, the worker leases some of them, and only then
// re-sends the results it kept while the daemon was away. Those count, so the job withdraws
// its queued tasks past the target, and the results of tasks leased before count only up to
// the target (they are stored all the same).
TEST_F(ServiceTest, ResultsKeptAcrossARestartNeverTakeTheJobPastItsTarget) {
  ServiceOptions o = Options();
  StartServer(o);
  const std::string job = Submit(12, 12, /*seed=*/0);
  ASSERT_FALSE(job.empty());
  std::string w = RegisterWorker("host-a");
  v1::LeaseResponse kept = Lease(w, 6, 10000);
  ASSERT_EQ(kept.tasks_size(), 6);
  StopServer();  // the worker measures `kept` meanwhile and spools its results

  StartServer(o);
  EXPECT_EQ(Job(job).workloads(0).trials_done(), 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (service_->QueueDepth() < 12 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(service_->QueueDepth(), 12) << "the resumed job did not dispatch its 12 trials";
  w = RegisterWorker("host-a");
  v1::LeaseResponse first = Lease(w, 6, 2000);
  ASSERT_EQ(first.tasks_size(), 6);

  // The spool arrives: every kept result is stored and counts.
  v1::ReportRequest spooled = OkReport(w, kept);
  for (const v1::Task& t : kept.tasks()) *spooled.add_tasks() = t;
  v1::ReportResponse r = Report(spooled);
  EXPECT_EQ(r.accepted(), 6);
  EXPECT_EQ(r.rejected(), 0);
  EXPECT_EQ(Job(job).workloads(0).trials_done(), 6);
  // 6 trials done: the tasks still out (those of `first` the spool did not complete, and the
  // queue) make up the other 6, no more.
  std::set<std::string> kept_ids;
  for (const v1::Task& t : kept.tasks()) kept_ids.insert(t.candidate_id());
  int first_live = 0;
  for (const v1::Task& t : first.tasks()) first_live += kept_ids.count(t.candidate_id()) == 0;
  EXPECT_EQ(first_live + service_->QueueDepth(), 6);

  // The first lease's results, then whatever is left, as the worker would go on.
  r = Report(OkReport(w, first));
  EXPECT_EQ(r.accepted(), first_live);
  for (v1::LeaseResponse l = Lease(w, 64, 200); l.tasks_size() > 0; l = Lease(w, 64, 200)) {
    EXPECT_EQ(Report(OkReport(w, l)).accepted(), l.tasks_size());
  }
  while (Job(job).state() != v1::DONE && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  v1::JobStatus st = Job(job);
  EXPECT_EQ(st.state(), v1::DONE);
  EXPECT_EQ(st.workloads(0).trials_done(), 12);
  EXPECT_EQ(StoredRecords(), 12);
}

// A worker's spool that reaches the restarted daemon only after the resumed job has ended is
// still stored (results are never thrown away), and the job's count stays at its target.
TEST_F(ServiceTest, ResultsKeptAcrossARestartAreStoredAfterTheResumedJobEnded) {
  ServiceOptions o = Options();
  StartServer(o);
  const std::string job = Submit(8, 8, /*seed=*/0);
  ASSERT_FALSE(job.empty());
  std::string w = RegisterWorker("host-a");
  v1::LeaseResponse kept = Lease(w, 8, 10000);
  ASSERT_EQ(kept.tasks_size(), 8);
  StopServer();

  StartServer(o);
  w = RegisterWorker("host-a");
  std::vector<std::string> seen;
  RunWorker(w, job, &seen, 8);
  const std::set<std::string> redispatched(seen.begin(), seen.end());
  v1::JobStatus st = Job(job);
  ASSERT_EQ(st.state(), v1::DONE);
  ASSERT_EQ(st.workloads(0).trials_done(), 8);
  int late = 0;
  for (const v1::Task& t : kept.tasks()) late += redispatched.count(t.candidate_id()) == 0;
  ASSERT_GT(late, 0) << "the resumed job drew the same candidates";

  v1::ReportRequest spooled = OkReport(w, kept);
  for (const v1::Task& t : kept.tasks()) *spooled.add_tasks() = t;
  v1::ReportResponse r = Report(spooled);
  EXPECT_EQ(r.accepted(), late);
  EXPECT_EQ(r.duplicates(), 8 - late);
  EXPECT_EQ(r.rejected(), 0);
  EXPECT_EQ(Job(job).workloads(0).trials_done(), 8);
  EXPECT_EQ(StoredRecords(), 8 + late);
}

// Two jobs tune the same workload at once: after a restart, each resumes with its own trials,
// not with every trace stored since it was created.
TEST_F(ServiceTest, ResumedJobCountsOnlyItsOwnTrialsWhenAnotherJobSharedItsWorkload) {
  StartServer(Options());
  const std::string a = Submit(16, 4);
  const std::string w = RegisterWorker("host-a");
  v1::LeaseResponse first = Lease(w, 4);
  ASSERT_EQ(first.tasks_size(), 4);
  ASSERT_EQ(Report(OkReport(w, first)).accepted(), 4);
  const std::string b = Submit(16, 4);
  // Only b's tasks are measured; a's stay leased (a stops dispatching at its target), so the
  // two jobs never measure one candidate.
  int reported_b = 0;
  for (int i = 0; i < 40 && reported_b < 8; ++i) {
    v1::LeaseResponse l = Lease(w, 4, 500);
    v1::LeaseResponse mine;
    mine.set_lease_id(l.lease_id());
    for (const v1::Task& t : l.tasks()) {
      if (t.job_id() == b) *mine.add_tasks() = t;
    }
    if (mine.tasks().empty()) continue;
    EXPECT_EQ(Report(OkReport(w, mine)).accepted(), mine.tasks_size());
    reported_b += mine.tasks_size();
  }
  ASSERT_GE(reported_b, 8);
  EXPECT_EQ(Job(a).workloads(0).trials_done(), 4);
  EXPECT_EQ(Job(b).workloads(0).trials_done(), reported_b);
  StopServer();
  EXPECT_EQ(StoredRecords(), 4 + reported_b);

  StartServer(Options());
  EXPECT_EQ(Job(a).workloads(0).trials_done(), 4);
  EXPECT_EQ(Job(b).workloads(0).trials_done(), reported_b);
}

}  // namespace
}  // namespace lathe::daemon
