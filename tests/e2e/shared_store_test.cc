// End-to-end: two lathed daemons, each with its own worker, on one PostgreSQL database (a
// server of the test's own, tests/db/pg_server.h; skipped, saying why, where none starts).
// A record tuned through one daemon is the best answer of the other's queries; their jobs
// never collide (a daemon started while the other runs a job leaves that job alone); kill -9
// of a daemon mid-job loses no acknowledged record and stores nothing twice, and the restarted
// daemon finishes its job.
#include <signal.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ir/workload.h"
#include "tests/db/pg_server.h"
#include "tests/e2e/e2e_util.h"

namespace lathe::e2e {
namespace {

constexpr char kWorkloadA[] = "matmul:m=32,n=32,k=32";
constexpr char kWorkloadB[] = "matmul:m=32,n=32,k=48";

const std::vector<std::string> kFastLeases = {"--heartbeat-ms", "300", "--lease-ms", "1500"};

std::string Key(const char* spec) { return ir::WorkloadKey(ir::MakeWorkload(spec)->canonical); }

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<db::testing::PgServer*> server = db::testing::PgServer::Get();
    if (!server.ok()) GTEST_SKIP() << "no PostgreSQL server: " << server.status().message();
    absl::StatusOr<std::string> url = (*server)->NewDatabase();
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }

  // The candidate ids stored for a workload.
  std::set<std::string> Candidates(const std::string& key) {
    std::set<std::string> ids;
    db::OpenOptions o;
    o.create_if_missing = false;
    absl::StatusOr<std::unique_ptr<db::Database>> d = db::Database::Open(url_, o);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return ids;
    EXPECT_TRUE((*d)->ForEachRecord([&](const db::Record& r) {
                      if (r.workload_key == key) ids.insert(r.candidate_id);
                      return absl::OkStatus();
                    })
                    .ok());
    return ids;
  }

  std::string url_;
};

TEST_F(SharedStoreTest, TwoDaemonsShareRecordsAndTheirJobsDoNotCollide) {
  Cluster a, b;
  a.UseDatabase(url_);
  b.UseDatabase(url_);
  ASSERT_TRUE(a.StartDaemon());
  ASSERT_TRUE(b.StartDaemon());
  ASSERT_NE(a.StartWorker(), nullptr);
  ASSERT_NE(b.StartWorker(), nullptr);
  auto ca = a.Client();
  auto cb = b.Client();
  ASSERT_NE(ca, nullptr);
  ASSERT_NE(cb, nullptr);
  ASSERT_TRUE(a.WaitForWorkers(*ca, 1));
  ASSERT_TRUE(b.WaitForWorkers(*cb, 1));

  // A job on each daemon at once.
  absl::StatusOr<std::string> ja = ca->SubmitJob(SmallJob(kWorkloadA, 24, 8));
  absl::StatusOr<std::string> jb = cb->SubmitJob(SmallJob(kWorkloadB, 24, 8));
  ASSERT_TRUE(ja.ok()) << ja.status();
  ASSERT_TRUE(jb.ok()) << jb.status();
  EXPECT_NE(*ja, *jb);
  absl::StatusOr<lathe::v1::JobStatus> da = WaitForJob(*ca, *ja, 180);
  absl::StatusOr<lathe::v1::JobStatus> db_ = WaitForJob(*cb, *jb, 180);
  ASSERT_TRUE(da.ok()) << da.status();
  ASSERT_TRUE(db_.ok()) << db_.status();
  EXPECT_EQ(da->state(), lathe::v1::DONE) << da->message();
  EXPECT_EQ(db_->state(), lathe::v1::DONE) << db_->message();
  EXPECT_EQ(Candidates(Key(kWorkloadA)).size(), 24u);
  EXPECT_EQ(Candidates(Key(kWorkloadB)).size(), 24u);

  // Each daemon lists its own job, not the other's running one.
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> la = ca->ListJobs();
  ASSERT_TRUE(la.ok()) << la.status();
  ASSERT_EQ(la->size(), 1u);
  EXPECT_EQ((*la)[0].job_id(), *ja);

  // The record tuned through A is B's answer, through the daemon and from the store directly.
  const std::string lathe = LATHE_BIN;
  for (const char* spec : {kWorkloadA, kWorkloadB}) {
    auto [qa, out_a] = RunCommand(lathe + " query --json --tuner " + a.address() + " --workload " +
                                  spec + " 2>&1");
    auto [qb, out_b] = RunCommand(lathe + " query --json --tuner " + b.address() + " --workload " +
                                  spec + " 2>&1");
    auto [qd, out_d] =
        RunCommand(lathe + " query --json --db '" + url_ + "' --workload " + spec + " 2>&1");
    ASSERT_EQ(qa, 0) << out_a;
    ASSERT_EQ(qb, 0) << out_b;
    ASSERT_EQ(qd, 0) << out_d;
    nlohmann::json ra = nlohmann::json::parse(out_a, nullptr, false);
    nlohmann::json rb = nlohmann::json::parse(out_b, nullptr, false);
    nlohmann::json rd = nlohmann::json::parse(out_d, nullptr, false);
    for (const char* field : {"workload", "device_class", "latency_us", "trace", "worker"}) {
      EXPECT_EQ(ra[field], rb[field]) << spec << " " << field;
      EXPECT_EQ(ra[field], rd[field]) << spec << " " << field;
    }
  }
  auto [src, sout] = RunCommand(lathe + " db stats --json --db '" + url_ + "' 2>&1");
  ASSERT_EQ(src, 0) << sout;
  nlohmann::json stats = nlohmann::json::parse(sout, nullptr, false);
  EXPECT_GE(stats["records"].get<int64_t>(), 48) << sout;
}

// B starts while A runs a job: B leaves it alone. A is killed mid-job and restarted: it
// resumes the job, which ends with every trial stored once, every record acknowledged before
// the kill still there, and B's own job unaffected.
TEST_F(SharedStoreTest, KilledDaemonLosesNothingAndDuplicatesNothing) {
  Cluster a, b;
  a.UseDatabase(url_);
  b.UseDatabase(url_);
  ASSERT_TRUE(a.StartDaemon(kFastLeases));
  const std::string address_a = a.address();
  ASSERT_NE(a.StartWorker(), nullptr);
  auto ca = a.Client();
  ASSERT_NE(ca, nullptr);
  ASSERT_TRUE(a.WaitForWorkers(*ca, 1));
  absl::StatusOr<std::string> ja = ca->SubmitJob(SmallJob(kWorkloadA, 40, 8));
  ASSERT_TRUE(ja.ok()) << ja.status();

  ASSERT_TRUE(b.StartDaemon(kFastLeases));
  ASSERT_NE(b.StartWorker(), nullptr);
  auto cb = b.Client();
  ASSERT_NE(cb, nullptr);
  ASSERT_TRUE(b.WaitForWorkers(*cb, 1));
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> lb = cb->ListJobs();
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_TRUE(lb->empty()) << "B took A's running job";
  absl::StatusOr<std::string> jb = cb->SubmitJob(SmallJob(kWorkloadB, 24, 8));
  ASSERT_TRUE(jb.ok()) << jb.status();

  bool restarted = false;
  std::set<std::string> before_kill;
  absl::StatusOr<lathe::v1::JobStatus> da =
      WaitForJob(*ca, *ja, 200, [&](const lathe::v1::JobStatus& s) {
        if (!restarted && TrialsDone(s) >= 8 && !lathe::client::IsFinal(s.state())) {
          a.daemon()->Signal(SIGKILL);
          a.daemon()->Wait(10000);
          before_kill = Candidates(Key(kWorkloadA));
          restarted = a.StartDaemon(kFastLeases, address_a);
        }
      });
  ASSERT_TRUE(restarted);
  ASSERT_TRUE(da.ok()) << da.status();
  EXPECT_EQ(da->state(), lathe::v1::DONE) << da->message();
  EXPECT_EQ(TrialsDone(*da), 40);
  absl::StatusOr<lathe::v1::JobStatus> dbs = WaitForJob(*cb, *jb, 200);
  ASSERT_TRUE(dbs.ok()) << dbs.status();
  EXPECT_EQ(dbs->state(), lathe::v1::DONE) << dbs->message();

  std::set<std::string> after = Candidates(Key(kWorkloadA));
  EXPECT_GE(before_kill.size(), 8u);
  for (const std::string& id : before_kill) EXPECT_TRUE(after.count(id)) << id << " lost";
  // Every trial stored once: no candidate twice (unique ids) and no trace measured twice.
  db::OpenOptions o;
  o.create_if_missing = false;
  absl::StatusOr<std::unique_ptr<db::Database>> d = db::Database::Open(url_, o);
  ASSERT_TRUE(d.ok()) << d.status();
  std::map<std::string, int> traces;
  int64_t records_a = 0;
  ASSERT_TRUE((*d)->ForEachRecord([&](const db::Record& r) {
                    if (r.workload_key != Key(kWorkloadA)) return absl::OkStatus();
                    ++records_a;
                    ++traces[r.device_class + "\n" + r.trace_json];
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_GE(records_a, 40);
  EXPECT_EQ(static_cast<int64_t>(traces.size()), records_a) << "a trace was stored twice";
  EXPECT_EQ(Candidates(Key(kWorkloadB)).size(), 24u);
  // The restarted A knows its job; B still only its own.
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> la = ca->ListJobs();
  ASSERT_TRUE(la.ok()) << la.status();
  bool found = false;
  for (const auto& j : *la) found = found || j.job_id() == *ja;
  EXPECT_TRUE(found);
  lb = cb->ListJobs();
  ASSERT_TRUE(lb.ok()) << lb.status();
  ASSERT_EQ(lb->size(), 1u);
  EXPECT_EQ((*lb)[0].job_id(), *jb);
}

}  // namespace
}  // namespace lathe::e2e
