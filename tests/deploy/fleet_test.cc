// The fleet across a real network (issue 17): one tuner host and three worker hosts made of
// network namespaces, every link with 40 ms of delay each way and 1 % loss each way, the third
// worker behind a NAT router (the pull model needs no inbound port), mTLS with a CA and
// certificates made here by deploy/tls/make-certs.sh. Real lathed and lathe-worker processes.
//
//        w1 (10.77.1.2) ───┐
//        w2 (10.77.2.2) ───┼── tuner (lathed on 0.0.0.0:7070; this test's client)
//   w3 (192.168.77.2) ── nat (10.77.3.2, masquerade) ──┘
//
// Scenarios: a 128-trial job completes (and the same job on loopback, for its speed); one
// worker's link goes down for 30 s mid-job and comes back; lathed is killed -9 and restarted
// on the same database; workers with a certificate from another CA, or none, are refused.
// Each checks the database: as many records as trials, no candidate stored twice. The test
// prints what it measured (trials/s across the links against loopback, lease expiries,
// spooled results, duplicates).
//
// The test process joins the tuner's namespace once (SetUpTestSuite, before gRPC starts any
// thread), so its client reaches lathed on 127.0.0.1; the processes run in their hosts
// through `ip netns exec`. Labels e2e and netns; skips, saying why, without root or iproute2.
#include <fcntl.h>
#include <sched.h>

#include <map>
#include <regex>

#include "ir/workload.h"
#include "tests/deploy/netns.h"
#include "tests/e2e/e2e_util.h"

namespace lathe::deploy {
namespace {

using e2e::Clock;
using e2e::CountRecords;
using e2e::DbCount;
using e2e::ReadAll;

constexpr char kWorkload[] = "matmul:m=32,n=32,k=32";
constexpr int kTrials = 128;
constexpr int kDelayMs = 40;
constexpr double kLoss = 0.01;
constexpr int kPort = 7070;          // lathed across the links
constexpr int kLoopbackPort = 7071;  // the loopback baseline
// Leases expire 8 s after the last heartbeat (1 s apart), so a link down for 30 s loses its
// lease while a lost packet or two never does.
const std::vector<std::string> kDaemonFlags = {"--heartbeat-ms",  "1000", "--lease-ms", "8000",
                                               "--remeasure-top", "0"};

std::string Key() { return ir::WorkloadKey(ir::MakeWorkload(kWorkload)->canonical); }

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The worker hosts: name, the address of the tuner each one dials.
struct WorkerHost {
  std::string host;
  std::string tuner_ip;
};
const std::vector<WorkerHost> kWorkers = {
    {"w1", "10.77.1.1"}, {"w2", "10.77.2.1"}, {"w3", "10.77.3.1"}};

// The topology and TLS material, shared by the tests of the suite.
struct Shared {
  std::string skip;  // why the suite cannot run here; empty: it can
  std::string dir;
  std::unique_ptr<Network> net;
  int w2_link = -1;
};
Shared* g = nullptr;

std::string Certs() { return g->dir + "/certs"; }

bool MakeCerts(std::string* error) {
  const std::string mk = std::string("bash ") + LATHE_SOURCE_DIR + "/deploy/tls/make-certs.sh ";
  std::string sans = "IP:127.0.0.1";
  for (const WorkerHost& w : kWorkers) sans += " IP:" + w.tuner_ip;
  if (!Sh(mk + Certs() + " ca", error) || !Sh(mk + Certs() + " server lathed " + sans, error) ||
      !Sh(mk + Certs() + " client client", error)) {
    return false;
  }
  for (const WorkerHost& w : kWorkers) {
    if (!Sh(mk + Certs() + " client " + w.host, error)) return false;
  }
  // Another CA, and a worker certificate it signed.
  return Sh(mk + g->dir + "/other-ca ca", error) &&
         Sh(mk + g->dir + "/other-ca client rogue", error);
}

bool BuildTopology(std::string* error) {
  Network& n = *g->net;
  for (const char* h : {"tuner", "w1", "w2", "w3", "nat"}) {
    if (!n.AddHost(h, error)) return false;
  }
  if (n.AddLink("tuner", "to-w1", "10.77.1.1", "w1", "wan0", "10.77.1.2", kDelayMs, kLoss, error) <
      0) {
    return false;
  }
  g->w2_link =
      n.AddLink("tuner", "to-w2", "10.77.2.1", "w2", "wan0", "10.77.2.2", kDelayMs, kLoss, error);
  if (g->w2_link < 0) return false;
  if (n.AddLink("tuner", "to-nat", "10.77.3.1", "nat", "wan0", "10.77.3.2", kDelayMs, kLoss,
                error) < 0 ||
      n.AddLink("nat", "lan0", "192.168.77.1", "w3", "wan0", "192.168.77.2", kDelayMs, kLoss,
                error) < 0) {
    return false;
  }
  // w1 and w2 reach the tuner on their links; w3 only through the router, which masquerades:
  // the tuner has no route to 192.168.77.0/24 at all.
  return n.Route("w1", "default via 10.77.1.1", error) &&
         n.Route("w2", "default via 10.77.2.1", error) &&
         n.Route("w3", "default via 192.168.77.1", error) &&
         n.Route("nat", "default via 10.77.3.1", error) && n.Masquerade("nat", "wan0", error);
}

// One lathed and its workers, in the hosts of the topology or all on the tuner's loopback.
class Fleet {
 public:
  Fleet(const std::string& name, bool loopback) : loopback_(loopback) {
    dir_ = g->dir + "/" + name;
    std::filesystem::create_directories(dir_);
    db_ = dir_ + "/tuning.db";
  }
  ~Fleet() {
    for (Process* p : all_) {
      if (p->running()) {
        p->Signal(SIGKILL);
        p->Wait(10000);
      }
    }
    if (::testing::Test::HasFailure()) {
      for (Process* p : all_) {
        std::string text = ReadAll(p->log());
        if (text.size() > 5000) text = "...\n" + text.substr(text.size() - 5000);
        std::fprintf(stderr, "---- %s ----\n%s\n", p->log().c_str(), text.c_str());
      }
    }
  }

  const std::string& db() const { return db_; }
  Process* daemon() const { return daemon_; }
  int port() const { return loopback_ ? kLoopbackPort : kPort; }

  bool StartDaemon() {
    const std::string listen = (loopback_ ? "127.0.0.1:" : "0.0.0.0:") + std::to_string(port());
    std::vector<std::string> argv = {LATHED_BIN,
                                     "--listen",
                                     listen,
                                     "--db",
                                     db_,
                                     "--tls-cert",
                                     Certs() + "/lathed.pem",
                                     "--tls-key",
                                     Certs() + "/lathed.key",
                                     "--tls-client-ca",
                                     Certs() + "/ca.pem"};
    argv.insert(argv.end(), kDaemonFlags.begin(), kDaemonFlags.end());
    const std::string log = dir_ + "/lathed." + std::to_string(daemons_++) + ".log";
    daemon_ = Keep(g->net->Spawn("tuner", argv, log));
    if (daemon_ == nullptr || !daemon_->WaitForLine("lathed: listening on ", 30000)) {
      ADD_FAILURE() << "lathed did not start; log:\n" << ReadAll(log);
      return false;
    }
    return true;
  }

  // A worker in host `w` (in the tuner's host on loopback) with the certificate `cert` (a
  // name under the certificate directory `cert_dir`; empty: none).
  Process* StartWorker(const WorkerHost& w, const std::string& cert = "",
                       const std::string& cert_dir = "",
                       const std::vector<std::string>& extra = {}) {
    const std::string tuner = (loopback_ ? "127.0.0.1" : w.tuner_ip) + ":" + std::to_string(port());
    const std::string name = cert.empty() ? "nocert" : cert;
    std::vector<std::string> argv = {LATHE_WORKER_BIN,
                                     "--tuner",
                                     tuner,
                                     "--device",
                                     "cpu",
                                     "--spool",
                                     dir_ + "/spool-" + name,
                                     "--tls-ca",
                                     Certs() + "/ca.pem"};
    if (!cert.empty()) {
      const std::string d = cert_dir.empty() ? Certs() : cert_dir;
      argv.insert(argv.end(),
                  {"--tls-cert", d + "/" + cert + ".pem", "--tls-key", d + "/" + cert + ".key"});
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Keep(
        g->net->Spawn(loopback_ ? "tuner" : w.host, argv, dir_ + "/worker-" + name + ".log"));
  }

  // `extra`: more flags for the worker of a host.
  bool StartWorkers(const std::map<std::string, std::vector<std::string>>& extra = {}) {
    for (const WorkerHost& w : kWorkers) {
      auto more = extra.find(w.host);
      Process* p = StartWorker(w, w.host, "",
                               more == extra.end() ? std::vector<std::string>{} : more->second);
      if (p == nullptr) return false;
      workers_[w.host] = p;
    }
    return true;
  }
  Process* worker(const std::string& host) { return workers_[host]; }

  // Starts lathed and the three workers; returns the client once they are all registered
  // (null, with a test failure, when something did not come up). Across links of 80 and 160 ms
  // round trip, with TLS, registering takes a few round trips.
  std::unique_ptr<client::TunerClient> StartAll(
      const std::map<std::string, std::vector<std::string>>& extra = {}) {
    if (!StartDaemon() || !StartWorkers(extra)) return nullptr;
    std::unique_ptr<client::TunerClient> client = Client();
    if (client == nullptr || !WaitForWorkers(*client, 3, 20)) return nullptr;
    return client;
  }

  std::unique_ptr<client::TunerClient> Client() const {
    client::ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port());
    o.tls_ca = Certs() + "/ca.pem";
    o.tls_cert = Certs() + "/client.pem";
    o.tls_key = Certs() + "/client.key";
    o.timeout_ms = 15000;
    o.reconnect_ms = 60000;
    absl::StatusOr<std::unique_ptr<client::TunerClient>> c = client::TunerClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Live (not lost) workers the daemon knows.
  int LiveWorkers(client::TunerClient& client) {
    absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client.ListWorkers();
    if (!ws.ok()) return -1;
    int live = 0;
    for (const auto& w : *ws) live += w.state() != "lost";
    return live;
  }
  bool WaitForWorkers(client::TunerClient& client, int n, int timeout_s = 60) {
    for (auto until = Clock::now() + std::chrono::seconds(timeout_s); Clock::now() < until;) {
      if (LiveWorkers(client) >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << n << " workers did not register within " << timeout_s << " s";
    return false;
  }

  // Every lathed log of this fleet, concatenated.
  std::string DaemonLogs() const {
    std::string all;
    for (int i = 0; i < daemons_; ++i)
      all += ReadAll(dir_ + "/lathed." + std::to_string(i) + ".log");
    return all;
  }

 private:
  Process* Keep(std::unique_ptr<Process> p) {
    if (!p) {
      ADD_FAILURE() << "cannot spawn a process";
      return nullptr;
    }
    all_.push_back(p.get());
    owned_.push_back(std::move(p));
    return all_.back();
  }

  bool loopback_;
  std::string dir_, db_;
  int daemons_ = 0;
  Process* daemon_ = nullptr;
  std::map<std::string, Process*> workers_;
  std::vector<Process*> all_;
  std::vector<std::unique_ptr<Process>> owned_;
};

lathe::v1::JobSpec Job(int trials) {
  lathe::v1::JobSpec spec = e2e::SmallJob(kWorkload, trials, 32);
  spec.set_seed(11);
  return spec;
}

struct Outcome {
  lathe::v1::JobStatus status;
  double seconds = 0;
};

// Submits `spec`, follows it to its end; `on_status` sees every status.
std::optional<Outcome> RunJob(
    client::TunerClient& client, const lathe::v1::JobSpec& spec, int timeout_s,
    const std::function<void(const lathe::v1::JobStatus&)>& on_status = {}) {
  const auto start = Clock::now();
  absl::StatusOr<std::string> id = client.SubmitJob(spec);
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return std::nullopt;
  absl::StatusOr<lathe::v1::JobStatus> done = e2e::WaitForJob(client, *id, timeout_s, on_status);
  EXPECT_TRUE(done.ok()) << done.status();
  if (!done.ok()) return std::nullopt;
  EXPECT_EQ(done->state(), lathe::v1::DONE) << done->message();
  return Outcome{*done, std::chrono::duration<double>(Clock::now() - start).count()};
}

// As many records as trials, none stored twice; returns the duplicates (0 when it passed).
int64_t ExpectNoLossNoDuplicate(const Fleet& f, int trials) {
  DbCount n = CountRecords(f.db(), Key());
  EXPECT_EQ(n.records, trials) << "records of the workload in the database";
  EXPECT_EQ(n.distinct_candidates, n.records) << "a candidate was stored twice";
  return n.records - n.distinct_candidates;
}

class FleetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g = new Shared();
    g->skip = SkipReason();
    if (!g->skip.empty()) return;
    char tmpl[] = "/tmp/lathe_fleet_XXXXXX";
    g->dir = mkdtemp(tmpl);
    g->net = std::make_unique<Network>(LATHE_TEST_LINK_BIN, g->dir);
    std::string error;
    if (!MakeCerts(&error)) {
      g->skip = "cannot make the TLS material: " + error;
      return;
    }
    if (!BuildTopology(&error)) {
      g->skip = "cannot build the network: " + error;
      return;
    }
    // Join the tuner's host: every thread started from now on (gRPC's) lives there too.
    const int fd = open(("/run/netns/" + g->net->Ns("tuner")).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      g->skip = "cannot join the tuner's network namespace";
      return;
    }
    close(fd);
    std::printf("[fleet] links: %s, %d ms each way, %.0f %% loss each way; dir %s\n",
                g->net->link_kind(), kDelayMs, kLoss * 100, g->dir.c_str());
  }
  static void TearDownTestSuite() {
    g->net.reset();
    // LATHE_FLEET_KEEP=1 keeps the logs and databases of a passing run too.
    if (!g->dir.empty() && !::testing::UnitTest::GetInstance()->Failed() &&
        std::getenv("LATHE_FLEET_KEEP") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(g->dir, ec);
    }
    delete g;
    g = nullptr;
  }
  void SetUp() override {
    if (!g->skip.empty()) GTEST_SKIP() << g->skip;
  }
};

// The same 128-trial job on loopback (every process in the tuner's host) and across the
// delayed, lossy links, alternated loopback, links, links, loopback (the host's other load
// drifts); prints trials/s of each and the ratio of the medians.
TEST_F(FleetTest, JobCompletesAcrossDelayedLinks) {
  std::vector<double> loop_s, wan_s;
  int expiries = 0;
  int64_t dups = 0;
  for (int run = 0; run < 4; ++run) {
    const bool loopback = run == 0 || run == 3;
    SCOPED_TRACE(loopback ? "loopback" : "across the links");
    Fleet f((loopback ? "loopback" : "wan") + std::to_string(run), loopback);
    auto client = f.StartAll();
    ASSERT_NE(client, nullptr);
    std::optional<Outcome> o = RunJob(*client, Job(kTrials), 300);
    ASSERT_TRUE(o.has_value());
    (loopback ? loop_s : wan_s).push_back(o->seconds);
    dups += ExpectNoLossNoDuplicate(f, kTrials);
    if (loopback) continue;
    // Every worker measured, the one behind NAT included, and the router did translate.
    absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client->ListWorkers();
    ASSERT_TRUE(ws.ok()) << ws.status();
    ASSERT_EQ(ws->size(), 3u);
    for (const auto& w : *ws) {
      EXPECT_GT(w.measured(), 0) << "worker " << w.worker_id() << " measured nothing";
    }
    expiries += Count(f.DaemonLogs(), "event=lease_expired");
  }
  EXPECT_GT(g->net->MasqueradedPackets("nat"), 0) << "nothing went through the NAT router";
  const double loop = (loop_s[0] + loop_s[1]) / 2, wan = (wan_s[0] + wan_s[1]) / 2;
  std::printf(
      "[fleet] %d trials, 3 workers: loopback %.1f s and %.1f s (%.2f trials/s), across %d ms "
      "links %.1f s and %.1f s (%.2f trials/s) = %.2fx loopback; lease expiries %d, duplicates "
      "%lld\n",
      kTrials, loop_s[0], loop_s[1], kTrials / loop, kDelayMs, wan_s[0], wan_s[1], kTrials / wan,
      loop / wan, expiries, static_cast<long long>(dups));
}

// One worker alone, on loopback and across its 80 ms round-trip link: with no other worker to
// overlap with, what the link costs is what one worker's cycle fails to hide. The worker
// pipelines (it leases its next lease while it measures, and reports in the background) at
// the default lease depth (4 tasks) and at 16 (--batch); `--lease-ahead 0` is the synchronous
// cycle (lease, measure, report) for comparison. Order: loopback, link, link (16), link
// (--lease-ahead 0), loopback. Prints the ratios; no assertion.
TEST_F(FleetTest, OneWorkerAcrossItsLinkAgainstLoopback) {
  constexpr int kOneTrials = 64;
  std::vector<double> loop_s;
  double wan4 = 0, wan16 = 0, wan_sync = 0;
  for (int run = 0; run < 5; ++run) {
    const bool loopback = run == 0 || run == 4;
    Fleet f("one" + std::to_string(run), loopback);
    ASSERT_TRUE(f.StartDaemon());
    std::vector<std::string> extra;
    if (run == 2) extra = {"--batch", "16"};
    if (run == 3) extra = {"--lease-ahead", "0"};
    ASSERT_NE(f.StartWorker(kWorkers[0], kWorkers[0].host, "", extra), nullptr);
    auto client = f.Client();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(f.WaitForWorkers(*client, 1, 20));
    std::optional<Outcome> o = RunJob(*client, Job(kOneTrials), 300);
    ASSERT_TRUE(o.has_value());
    if (loopback) loop_s.push_back(o->seconds);
    if (run == 1) wan4 = o->seconds;
    if (run == 2) wan16 = o->seconds;
    if (run == 3) wan_sync = o->seconds;
    ExpectNoLossNoDuplicate(f, kOneTrials);
  }
  const double loop = (loop_s[0] + loop_s[1]) / 2;
  std::printf(
      "[fleet] one worker, %d trials: loopback %.1f s and %.1f s (%.2f trials/s); across its "
      "link, pipelined leases of 4 tasks %.1f s (%.2fx loopback), of 16 tasks %.1f s (%.2fx); "
      "synchronous cycle (--lease-ahead 0), 4 tasks %.1f s (%.2fx)\n",
      kOneTrials, loop_s[0], loop_s[1], kOneTrials / loop, wan4, loop / wan4, wan16, loop / wan16,
      wan_sync, loop / wan_sync);
}

// w2's link goes down for 30 s mid-job: its lease expires and its tasks move to the others;
// what it measured meanwhile waits in its spool and is re-sent when the link is back; the job
// completes with every trial stored once.
TEST_F(FleetTest, WorkerLinkDownForThirtySeconds) {
  // Long enough (about a minute here) that the job still runs when the link is back.
  constexpr int kOutageTrials = 4 * kTrials;
  Fleet f("outage", false);
  auto client = f.StartAll({{"w2", {"--log-level", "debug"}}});
  ASSERT_NE(client, nullptr);
  std::atomic<bool> cut{false};
  std::thread outage;
  std::optional<Outcome> o =
      RunJob(*client, Job(kOutageTrials), 600, [&](const lathe::v1::JobStatus& s) {
        if (cut.load() || e2e::TrialsDone(s) < 24) return;
        cut = true;
        outage = std::thread([&] {
          // Cut the moment w2 has a fresh lease in hand (its debug log says so): the daemon
          // holds that lease, and w2 measures its tasks with nowhere to report them.
          const std::string tag = "debug lathe-worker: lease ";
          const int before = Count(ReadAll(f.worker("w2")->log()), tag);
          bool leased = false;
          for (auto until = Clock::now() + std::chrono::seconds(20);
               !leased && Clock::now() < until;) {
            leased = Count(ReadAll(f.worker("w2")->log()), tag) > before;
            if (!leased) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          EXPECT_TRUE(leased) << "w2 was never handed a lease";
          std::string error;
          EXPECT_TRUE(g->net->SetDown(g->w2_link, true, &error)) << error;
          std::printf("[fleet] w2's link down with a lease in hand\n");
          std::this_thread::sleep_for(std::chrono::seconds(30));
          EXPECT_TRUE(g->net->SetDown(g->w2_link, false, &error)) << error;
          std::printf("[fleet] w2's link back\n");
        });
      });
  if (outage.joinable()) outage.join();
  ASSERT_TRUE(cut.load()) << "the job never reached 24 trials";
  ASSERT_TRUE(o.has_value());
  const int64_t dups = ExpectNoLossNoDuplicate(f, kOutageTrials);

  const std::string daemon_log = f.DaemonLogs();
  const int expiries = Count(daemon_log, "event=lease_expired");
  EXPECT_GE(expiries, 1) << "w2's lease did not expire";
  // w2 kept what it could not report and re-sent it when its link was back (the heartbeat
  // after its reconnection flushes the spool; the job may have ended just before).
  std::string w2;
  for (auto until = Clock::now() + std::chrono::seconds(60); Clock::now() < until;) {
    w2 = ReadAll(f.worker("w2")->log());
    if (w2.find("re-sent ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  int spooled = 0, resent = 0, stored = 0, known = 0;
  const std::regex spool_re("could not report (\\d+) result");
  for (std::sregex_iterator it(w2.begin(), w2.end(), spool_re), end; it != end; ++it) {
    spooled += std::stoi((*it)[1]);
  }
  const std::regex resent_re(
      "re-sent (\\d+) spooled result\\(s\\) to \\S+ \\((\\d+) stored, (\\d+) already stored");
  for (std::sregex_iterator it(w2.begin(), w2.end(), resent_re), end; it != end; ++it) {
    resent += std::stoi((*it)[1]);
    stored += std::stoi((*it)[2]);
    known += std::stoi((*it)[3]);
  }
  EXPECT_GT(spooled, 0) << "w2 spooled nothing while its link was down";
  EXPECT_EQ(resent, spooled) << "w2 did not re-send all it spooled";
  std::printf(
      "[fleet] link down 30 s: %d trials in %.1f s; lease expiries %d; w2 spooled %d result(s), "
      "re-sent %d on its return (%d stored then, %d measured meanwhile by others after its lease "
      "expired); duplicates in the database %lld\n",
      kOutageTrials, o->seconds, expiries, spooled, resent, stored, known,
      static_cast<long long>(dups));
}

// lathed is killed -9 mid-job and started again on the same database and address: the workers
// come back to it, the job resumes where its commits stopped and completes, nothing is stored
// twice.
TEST_F(FleetTest, DaemonKilledAndRestartedOnTheSameDatabase) {
  Fleet f("restart", false);
  auto client = f.StartAll();
  ASSERT_NE(client, nullptr);
  bool killed = false;
  int done_at_kill = 0;
  std::optional<Outcome> o = RunJob(*client, Job(kTrials), 300, [&](const lathe::v1::JobStatus& s) {
    if (killed || e2e::TrialsDone(s) < 40) return;
    killed = true;
    done_at_kill = e2e::TrialsDone(s);
    f.daemon()->Signal(SIGKILL);
    ASSERT_TRUE(f.daemon()->Wait(10000).has_value());
    ASSERT_TRUE(f.StartDaemon());
  });
  ASSERT_TRUE(killed) << "the job ended before 40 trials";
  ASSERT_TRUE(o.has_value());
  const int64_t dups = ExpectNoLossNoDuplicate(f, kTrials);
  EXPECT_NE(f.DaemonLogs().find("event=job_resumed"), std::string::npos);
  std::printf(
      "[fleet] lathed killed -9 at %d/%d trials and restarted: done in %.1f s, "
      "duplicates %lld\n",
      done_at_kill, kTrials, o->seconds, static_cast<long long>(dups));
}

// mTLS: a worker whose certificate another CA signed, and one with no certificate, never
// register; the daemon keeps serving the fleet.
TEST_F(FleetTest, WorkerWithACertificateFromAnotherCaIsRefused) {
  Fleet f("foreign", false);
  auto client = f.StartAll();
  ASSERT_NE(client, nullptr);
  Process* rogue = f.StartWorker(kWorkers[0], "rogue", g->dir + "/other-ca");
  Process* anonymous = f.StartWorker(kWorkers[1]);
  ASSERT_NE(rogue, nullptr);
  ASSERT_NE(anonymous, nullptr);
  std::this_thread::sleep_for(std::chrono::seconds(10));
  absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client->ListWorkers();
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_EQ(ws->size(), 3u) << "a worker without a certificate of the fleet's CA registered";
  for (Process* p : {rogue, anonymous}) {
    const std::string log = ReadAll(p->log());
    EXPECT_EQ(log.find("registered with"), std::string::npos) << log;
    EXPECT_NE(log.find("cannot register"), std::string::npos) << log;
  }
  EXPECT_NE(f.DaemonLogs().find("certificate verify failed"), std::string::npos)
      << "lathed did not log the refused handshake";
  // The fleet still works.
  std::optional<Outcome> o = RunJob(*client, Job(16), 120);
  ASSERT_TRUE(o.has_value());
  std::printf(
      "[fleet] a foreign-CA worker and a worker without a certificate were refused; the "
      "fleet then ran a 16-trial job in %.1f s\n",
      o->seconds);
}

}  // namespace
}  // namespace lathe::deploy
