// The measurement worker against a fake lathed WorkerService (a real gRPC server on
// 127.0.0.1:0, implemented here): registration, leases measured for real in the sandboxed
// child, crash classification, the spool across a daemon restart, a refused token, a SIGTERM
// drain of the real `lathe-worker` binary; plus the spool file and device selection.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/host.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "lathe/v1/service.grpc.pb.h"
#include "proto/trace_io.h"
#include "tests/measure/fault_plan.h"
#include "worker/discovery.h"
#include "worker/spool.h"
#include "worker/worker_loop.h"

namespace lathe::worker {
namespace {

using namespace std::chrono_literals;
using lathe::v1::MeasureResult;
using lathe::v1::Task;

std::string TempDir(const std::string& name) {
  std::string dir =
      testing::TempDir() + "/lathe_worker_test_" + std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

Task MakeTask(const std::string& id, const std::string& fault = "",
              const std::string& spec = "matmul:m=33,n=40,k=17", double min_repeat_ms = 5) {
  auto w = ir::MakeWorkload(spec);
  ir::Schedule s(*w);
  (void)s.Split("C", "j", {8});
  (void)s.Vectorize("C", "j.1");
  Task t;
  t.set_candidate_id(id);
  t.set_job_id("job1");
  t.set_device_class(codegen::HostDeviceClass());
  auto* r = t.mutable_request();
  r->set_candidate_id(id);
  r->set_workload(w->canonical);
  r->set_trace_json(traceio::TraceToJson(s.trace()));
  r->set_min_repeat_ms(min_repeat_ms);
  test_support::ProcessFaultPlan().Add(id, fault);
  return t;
}

// A lathed stand-in: a task queue, leases by long poll, idempotent reports, heartbeats that
// ask unknown workers to register again, and an optional bearer token.
class FakeDaemon final : public lathe::v1::WorkerService::Service {
 public:
  explicit FakeDaemon(std::string token = "") : token_(std::move(token)) {}

  void Add(Task t) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(t));
    cv_.notify_all();
  }
  // Waits until `pred` holds (checked under the lock); false on timeout.
  bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 30s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }
  // Under the daemon's lock (for WaitFor predicates and after the fact).
  std::map<std::string, MeasureResult> results_;
  int registrations_ = 0, leases_ = 0, heartbeats_ = 0, reports_ = 0, refused_ = 0;
  int reregistrations_ = 0;         // registrations that gave a previous worker id
  int duplicates_ = 0;              // results reported a second time
  std::set<std::string> released_;  // candidates handed back unstarted (Release)
  // Leases granted while another lease of the worker was not reported yet.
  int leases_while_outstanding_ = 0;
  bool refuse_known_ids_ = false;  // such registrations are ALREADY_EXISTS
  std::mutex mu_;
  // A restart: every registration is forgotten (under the lock).
  void ForgetWorkers() { workers_.clear(); }

  grpc::Status Register(grpc::ServerContext* ctx, const lathe::v1::RegisterRequest* req,
                        lathe::v1::RegisterResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_FALSE(req->devices().empty());
    EXPECT_FALSE(req->hostname().empty());
    if (!req->worker_id().empty()) {
      ++reregistrations_;
      if (refuse_known_ids_) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "registered to another worker");
      }
    }
    std::string id = "w" + std::to_string(++next_id_);
    workers_.insert(id);
    ++registrations_;
    resp->set_worker_id(id);
    resp->set_worker_secret("secret-of-" + id);
    resp->set_heartbeat_interval_ms(200);
    resp->set_lease_duration_ms(10000);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Lease(grpc::ServerContext* ctx, const lathe::v1::LeaseRequest* req,
                     lathe::v1::LeaseResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    std::unique_lock<std::mutex> lock(mu_);
    if (!workers_.count(req->worker_id())) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker " + req->worker_id());
    }
    // Every call of a registered worker carries the secret its registration handed out.
    EXPECT_EQ(req->worker_secret(), "secret-of-" + req->worker_id());
    EXPECT_EQ(req->device_class(), codegen::HostDeviceClass());
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(req->wait_ms());
    while (queue_.empty() && !ctx->IsCancelled() && std::chrono::steady_clock::now() < until) {
      cv_.wait_for(lock, 20ms);
    }
    resp->set_lease_id("lease" + std::to_string(++leases_));
    while (!queue_.empty() && resp->tasks_size() < std::max(1, req->max_tasks())) {
      *resp->add_tasks() = queue_.front();
      leased_[queue_.front().candidate_id()] = queue_.front();
      queue_.pop_front();
    }
    if (resp->tasks_size() == 0) {
      --leases_;
    } else if (!leased_unreported_.empty()) {
      ++leases_while_outstanding_;
    }
    for (const Task& t : resp->tasks()) leased_unreported_.insert(t.candidate_id());
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Report(grpc::ServerContext* ctx, const lathe::v1::ReportRequest* req,
                      lathe::v1::ReportResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    ++reports_;
    if (workers_.count(req->worker_id())) {
      EXPECT_EQ(req->worker_secret(), "secret-of-" + req->worker_id());
    }
    for (const MeasureResult& r : req->results()) {
      leased_unreported_.erase(r.candidate_id());
      if (results_.emplace(r.candidate_id(), r).second) {
        resp->set_accepted(resp->accepted() + 1);
      } else {
        resp->set_duplicates(resp->duplicates() + 1);
        ++duplicates_;
      }
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // Tasks handed back go to the front of the queue again.
  grpc::Status Release(grpc::ServerContext* ctx, const lathe::v1::ReleaseRequest* req,
                       lathe::v1::ReleaseResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : req->candidate_ids()) {
      auto it = leased_.find(id);
      if (it == leased_.end() || results_.count(id) > 0) continue;
      released_.insert(id);
      leased_unreported_.erase(id);
      queue_.push_front(it->second);
      leased_.erase(it);
      resp->set_requeued(resp->requeued() + 1);
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const lathe::v1::HeartbeatRequest* req,
                         lathe::v1::HeartbeatResponse* resp) override {
    if (auto s = Auth(ctx); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    ++heartbeats_;
    if (workers_.count(req->worker_id())) {
      EXPECT_EQ(req->worker_secret(), "secret-of-" + req->worker_id());
    }
    resp->set_reregister(!workers_.count(req->worker_id()));
    cv_.notify_all();
    return grpc::Status::OK;
  }

 private:
  grpc::Status Auth(grpc::ServerContext* ctx) {
    if (token_.empty()) return grpc::Status::OK;
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end() &&
        std::string(it->second.data(), it->second.size()) == "Bearer " + token_) {
      return grpc::Status::OK;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
    cv_.notify_all();
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong token");
  }

  std::string token_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::map<std::string, Task> leased_;       // every task leased, by candidate id
  std::set<std::string> leased_unreported_;  // leased, neither reported nor handed back
  std::set<std::string> workers_;
  int next_id_ = 0;
};

// The fake daemon served on 127.0.0.1 (port 0: any free port).
struct Server {
  Server(FakeDaemon* daemon, int port = 0,
         std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials()) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port), creds, &this->port);
    b.RegisterService(daemon);
    server = b.BuildAndStart();
  }
  ~Server() { Stop(); }
  void Stop() {
    if (!server) return;
    server->Shutdown(std::chrono::system_clock::now() + 100ms);
    server->Wait();
    server.reset();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

WorkerOptions Options(const std::string& tuner, const std::string& name) {
  WorkerOptions o;
  o.tuner = tuner;
  auto cpu = SelectDevices({"cpu"});
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  o.devices = *cpu;
  o.lease_batch = 3;
  o.lease_wait_ms = 300;
  o.rpc_timeout_ms = 3000;
  o.backoff_max_ms = 500;
  o.spool_dir = TempDir(name);
  o.measurer.child_path = LATHE_MEASURE_BIN;
  o.measurer.child_env = {test_support::ProcessFaultPlan().Env()};
  o.measurer.timeout_s = 20;
  return o;
}

// Runs a worker on a thread; stops it after `limit` if it has not returned by then.
class Running {
 public:
  explicit Running(std::unique_ptr<Worker> w, std::chrono::seconds limit = 40s)
      : worker_(std::move(w)) {
    thread_ = std::thread([this] {
      status_ = worker_->Run();
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
    watchdog_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        ADD_FAILURE() << "worker still running after " << limit.count() << " s";
        worker_->Stop();
      }
    });
  }
  // The status was checked by the test where it mattered; the destructor only joins.
  ~Running() { Join().IgnoreError(); }
  absl::Status Join() {
    if (thread_.joinable()) thread_.join();
    if (watchdog_.joinable()) watchdog_.join();
    return status_;
  }
  Worker& worker() { return *worker_; }

 private:
  std::unique_ptr<Worker> worker_;
  std::thread thread_, watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
};

TEST(WorkerTest, RegistersLeasesMeasuresAndReportsThreeTasks) {
  FakeDaemon daemon("s3cret");
  Server server(&daemon);
  for (int i = 0; i < 3; ++i) daemon.Add(MakeTask("c" + std::to_string(i)));
  WorkerOptions o = Options(server.address(), "three");
  o.token = "s3cret";
  o.max_tasks = 3;
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  ASSERT_TRUE(run.Join().ok());
  std::lock_guard<std::mutex> lock(daemon.mu_);
  EXPECT_EQ(daemon.registrations_, 1);
  ASSERT_EQ(daemon.results_.size(), 3u);
  for (const auto& [id, r] : daemon.results_) {
    EXPECT_EQ(r.error_class(), lathe::v1::OK) << id << ": " << r.error_msg();
    EXPECT_GT(r.median_us(), 0);
    EXPECT_GE(r.repeats_us_size(), 1);
  }
  EXPECT_EQ(run.worker().stats().measured, 3);
  EXPECT_EQ(run.worker().stats().reported, 3);
  EXPECT_EQ(run.worker().stats().spooled, 0);
}

// A daemon that restarted and gave this worker's id to another worker refuses the id
// (ALREADY_EXISTS): the worker registers anew under a new id and goes on measuring.
TEST(WorkerTest, RefusedPreviousIdRegistersAnewAndGoesOn) {
  FakeDaemon daemon("");
  Server server(&daemon);
  WorkerOptions o = Options(server.address(), "refused-id");
  o.max_tasks = 1;
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  ASSERT_TRUE(daemon.WaitFor([&] { return daemon.registrations_ == 1; }));
  {
    std::lock_guard<std::mutex> lock(daemon.mu_);
    daemon.ForgetWorkers();  // "restarted": the next call asks it to register again
    daemon.refuse_known_ids_ = true;
  }
  ASSERT_TRUE(daemon.WaitFor([&] { return daemon.registrations_ == 2; }));
  daemon.Add(MakeTask("after"));
  ASSERT_TRUE(run.Join().ok());
  std::lock_guard<std::mutex> lock(daemon.mu_);
  EXPECT_GE(daemon.reregistrations_, 1);
  EXPECT_EQ(run.worker().worker_id(), "w2");
  EXPECT_EQ(daemon.results_.count("after"), 1u);
}

TEST(WorkerTest, CrashingTaskIsARuntimeErrorAndTheWorkerGoesOn) {
  FakeDaemon daemon;
  Server server(&daemon);
  daemon.Add(MakeTask("boom", "crash"));
  daemon.Add(MakeTask("fine"));
  WorkerOptions o = Options(server.address(), "crash");
  o.lease_batch = 1;  // two leases: the worker leases again after the crash
  o.max_tasks = 2;
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  ASSERT_TRUE(run.Join().ok());
  std::lock_guard<std::mutex> lock(daemon.mu_);
  ASSERT_EQ(daemon.results_.size(), 2u);
  EXPECT_EQ(daemon.results_["boom"].error_class(), lathe::v1::RUNTIME_ERROR);
  EXPECT_NE(daemon.results_["boom"].error_msg().find("signal"), std::string::npos)
      << daemon.results_["boom"].error_msg();
  EXPECT_EQ(daemon.results_["fine"].error_class(), lathe::v1::OK)
      << daemon.results_["fine"].error_msg();
  EXPECT_EQ(daemon.leases_, 2);
}

TEST(WorkerTest, ResultsAreSpooledWhileTheDaemonIsAwayAndReportedWhenItIsBack) {
  auto daemon = std::make_unique<FakeDaemon>();
  auto server = std::make_unique<Server>(daemon.get());
  const int port = server->port;
  // A task that hangs until the measurer's deadline (2 s): time to take the daemon away.
  daemon->Add(MakeTask("slow", "hang"));
  WorkerOptions o = Options(server->address(), "spool");
  o.measurer.timeout_s = 2;
  const std::string spool_file = o.spool_dir + "/results.spool";
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  ASSERT_TRUE(daemon->WaitFor([&] { return daemon->leases_ == 1; }));
  server->Stop();  // the daemon goes away while the task is being measured

  for (int i = 0; i < 200 && run.worker().stats().spooled == 0; ++i)
    std::this_thread::sleep_for(50ms);
  ASSERT_EQ(run.worker().stats().spooled, 1);
  EXPECT_GT(std::filesystem::file_size(spool_file), 0u);

  // It restarts on the same port, knowing nothing of this worker.
  auto daemon2 = std::make_unique<FakeDaemon>();
  server = std::make_unique<Server>(daemon2.get(), port);
  ASSERT_EQ(server->port, port);
  ASSERT_TRUE(daemon2->WaitFor([&] { return daemon2->results_.count("slow") > 0; }))
      << "the spooled result never arrived";
  {
    std::lock_guard<std::mutex> lock(daemon2->mu_);
    EXPECT_EQ(daemon2->results_["slow"].error_class(), lathe::v1::TIMEOUT);
    EXPECT_GE(daemon2->registrations_, 1);
  }
  for (int i = 0; i < 100 && std::filesystem::file_size(spool_file) > 0; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(std::filesystem::file_size(spool_file), 0u);
  run.worker().Stop();
  ASSERT_TRUE(run.Join().ok());
  EXPECT_EQ(run.worker().stats().resent, 1);
  EXPECT_GE(run.worker().stats().registrations, 2);
}

TEST(WorkerTest, WorkerWithoutTheTokenStopsWithAClearError) {
  FakeDaemon daemon("s3cret");
  Server server(&daemon);
  daemon.Add(MakeTask("never"));
  WorkerOptions o = Options(server.address(), "token");
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  absl::Status st = run.Join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_NE(st.message().find("--token-file"), std::string::npos) << st;
  std::lock_guard<std::mutex> lock(daemon.mu_);
  EXPECT_EQ(daemon.refused_, 1);
  EXPECT_TRUE(daemon.results_.empty());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// --tls-ca: the worker dials the daemon over TLS and checks its certificate.
TEST(WorkerTest, TalksTlsToADaemonWithACertificateFromTheGivenCa) {
  std::string dir = TempDir("tls");
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no openssl to make a test certificate";
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({ReadFile(dir + "/key.pem"), ReadFile(dir + "/cert.pem")});
  FakeDaemon daemon;
  Server server(&daemon, 0, grpc::SslServerCredentials(ssl));
  daemon.Add(MakeTask("tls"));
  WorkerOptions o = Options(server.address(), "tls_spool");
  o.tls_ca_pem = ReadFile(dir + "/cert.pem");
  o.max_tasks = 1;
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  ASSERT_TRUE(run.Join().ok());
  std::lock_guard<std::mutex> lock(daemon.mu_);
  ASSERT_EQ(daemon.results_.count("tls"), 1u);
  EXPECT_EQ(daemon.results_["tls"].error_class(), lathe::v1::OK);
}

// The real lathe-worker binary as a child process, its log in `log`.
class WorkerProcess {
 public:
  WorkerProcess(const std::string& tuner, const std::string& dir,
                std::vector<std::string> extra = {})
      : log_(dir + "/worker.log") {
    std::vector<std::string> args = {LATHE_WORKER_BIN, "--tuner",     tuner,  "--spool",
                                     dir + "/spool",   "--log-level", "debug"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    env_s.push_back(std::string("LATHE_MEASURE_BIN=") + LATHE_MEASURE_BIN);
    env_s.push_back(test_support::ProcessFaultPlan().Env());
    std::vector<char*> envp;
    for (std::string& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_EQ(posix_spawn(&pid_, LATHE_WORKER_BIN, &fa, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~WorkerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) { kill(pid_, sig); }
  // The wait status, or nullopt when it is still running after `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    while (std::chrono::steady_clock::now() - t0 < timeout) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }
  std::string Log() const { return ReadFile(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// SIGTERM while a lease is being measured finishes the task in flight, reports it, leaves
// the lease's other tasks alone and exits 0.
// Pipelining: while a task measures (one that hangs until its deadline), the worker already
// holds its next lease, and only one lease ahead; Stop() then hands the lease taken ahead back
// unstarted, and the task in flight is reported once.
TEST(WorkerTest, LeasesTheNextBatchWhileMeasuringAndHandsItBackOnStop) {
  FakeDaemon daemon;
  Server server(&daemon);
  daemon.Add(MakeTask("slow", "hang"));
  for (int i = 0; i < 4; ++i) daemon.Add(MakeTask("next" + std::to_string(i)));
  WorkerOptions o = Options(server.address(), "ahead");
  o.lease_batch = 1;
  o.lease_ahead = 1;
  o.measurer.timeout_s = 3;  // "slow" hangs until then: a timeout result
  auto w = Worker::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  Running run(std::move(*w));
  // The second lease is granted while the first one's task is still measuring.
  ASSERT_TRUE(daemon.WaitFor([&] { return daemon.leases_ == 2; }, 20s));
  std::this_thread::sleep_for(300ms);
  {
    std::lock_guard<std::mutex> lock(daemon.mu_);
    EXPECT_TRUE(daemon.results_.empty()) << "\"slow\" is still measuring";
    EXPECT_EQ(daemon.leases_, 2) << "one lease ahead, no more";
    EXPECT_EQ(daemon.leases_while_outstanding_, 1);
  }
  EXPECT_EQ(run.worker().stats().leased_ahead, 1);
  run.worker().Stop();
  ASSERT_TRUE(run.Join().ok());
  std::lock_guard<std::mutex> lock(daemon.mu_);
  ASSERT_EQ(daemon.results_.count("slow"), 1u) << "the task in flight is finished and reported";
  EXPECT_EQ(daemon.results_.size(), 1u);
  EXPECT_EQ(daemon.released_, std::set<std::string>({"next0"}))
      << "the lease taken ahead is handed back unstarted";
  EXPECT_EQ(daemon.duplicates_, 0);
  EXPECT_EQ(run.worker().stats().released, 1);
  EXPECT_EQ(run.worker().stats().reported, 1);
}

// Pipelined leases and background reports: every task measured and reported exactly once,
// whether a lease holds one task or several.
TEST(WorkerTest, PipelinedWorkerReportsEveryResultOnce) {
  for (int batch : {1, 2}) {
    FakeDaemon daemon;
    Server server(&daemon);
    for (int i = 0; i < 7; ++i) daemon.Add(MakeTask("p" + std::to_string(i)));
    WorkerOptions o = Options(server.address(), "pipelined" + std::to_string(batch));
    o.lease_batch = batch;
    o.lease_ahead = 1;
    o.max_tasks = 7;
    auto w = Worker::Create(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Running run(std::move(*w));
    ASSERT_TRUE(run.Join().ok());
    std::lock_guard<std::mutex> lock(daemon.mu_);
    EXPECT_EQ(daemon.results_.size(), 7u) << "batch " << batch;
    EXPECT_EQ(daemon.duplicates_, 0) << "batch " << batch;
    EXPECT_TRUE(daemon.released_.empty()) << "batch " << batch;
    EXPECT_EQ(run.worker().stats().measured, 7);
    EXPECT_EQ(run.worker().stats().reported, 7);
    EXPECT_EQ(run.worker().stats().spooled, 0);
  }
}

TEST(WorkerTest, SigtermDrainsTheTaskInFlightAndExitsZero) {
  FakeDaemon daemon;
  Server server(&daemon);
  const std::string spec = "matmul:m=256,n=256,k=256";
  for (int i = 0; i < 3; ++i) daemon.Add(MakeTask("t" + std::to_string(i), "", spec, 1000));
  WorkerProcess worker(server.address(), TempDir("sigterm"), {"--batch", "3"});
  ASSERT_TRUE(daemon.WaitFor([&] { return daemon.leases_ == 1; }, 20s)) << worker.Log();
  std::this_thread::sleep_for(300ms);
  worker.Signal(SIGTERM);
  auto status = worker.Wait(30s);
  ASSERT_TRUE(status.has_value()) << "lathe-worker did not exit after SIGTERM\n" << worker.Log();
  ASSERT_TRUE(WIFEXITED(*status)) << worker.Log();
  EXPECT_EQ(WEXITSTATUS(*status), 0) << worker.Log();
  std::lock_guard<std::mutex> lock(daemon.mu_);
  EXPECT_GE(daemon.results_.size(), 1u) << worker.Log();
  EXPECT_LT(daemon.results_.size(), 3u) << "the tasks not started should have been left\n"
                                        << worker.Log();
  for (const auto& [id, res] : daemon.results_) {
    EXPECT_EQ(res.error_class(), lathe::v1::OK) << id << ": " << res.error_msg();
  }
  EXPECT_NE(worker.Log().find("not started"), std::string::npos) << worker.Log();
}

// A second signal does not wait for the task (here one that hangs for 30 s): the worker
// exits at once and takes its measurement child with it.
TEST(WorkerTest, SecondSignalExitsAtOnce) {
  FakeDaemon daemon;
  Server server(&daemon);
  daemon.Add(MakeTask("stuck", "hang"));
  WorkerProcess worker(server.address(), TempDir("twice"), {"--timeout-s", "30"});
  ASSERT_TRUE(daemon.WaitFor([&] { return daemon.leases_ == 1; }, 20s)) << worker.Log();
  std::this_thread::sleep_for(200ms);
  worker.Signal(SIGTERM);
  std::this_thread::sleep_for(200ms);
  worker.Signal(SIGINT);
  auto status = worker.Wait(5s);
  ASSERT_TRUE(status.has_value()) << "lathe-worker did not exit after a second signal\n"
                                  << worker.Log();
  ASSERT_TRUE(WIFEXITED(*status)) << worker.Log();
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGINT) << worker.Log();
  std::lock_guard<std::mutex> lock(daemon.mu_);
  EXPECT_TRUE(daemon.results_.empty());
}

// ------------------------------------------------------------------------------- spool

lathe::v1::ReportRequest Batch(const std::string& lease, int n) {
  lathe::v1::ReportRequest b;
  b.set_lease_id(lease);
  b.set_device_class("cpu:x");
  for (int i = 0; i < n; ++i) b.add_results()->set_candidate_id(lease + "/" + std::to_string(i));
  return b;
}

TEST(SpoolTest, AppendsReadsAndDropsWhatWasDelivered) {
  std::string dir = TempDir("spool_unit");
  auto s = Spool::Open(dir);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->Empty());
  ASSERT_TRUE((*s)->Append(Batch("a", 2)).ok());
  ASSERT_TRUE((*s)->Append(Batch("b", 1)).ok());
  auto c = (*s)->ReadAll();
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->batches.size(), 2u);
  EXPECT_EQ(c->batches[0].lease_id(), "a");
  EXPECT_EQ(c->batches[0].results_size(), 2);
  EXPECT_EQ(c->batches[1].results(0).candidate_id(), "b/0");
  // A batch appended after the read survives dropping what was read.
  ASSERT_TRUE((*s)->Append(Batch("c", 1)).ok());
  ASSERT_TRUE((*s)->DropThrough(c->end).ok());
  c = (*s)->ReadAll();
  ASSERT_EQ(c->batches.size(), 1u);
  EXPECT_EQ(c->batches[0].lease_id(), "c");
  ASSERT_TRUE((*s)->DropThrough(c->end).ok());
  EXPECT_TRUE((*s)->Empty());
}

TEST(SpoolTest, TornTailIsCutOffAndLaterAppendsStayReadable) {
  std::string dir = TempDir("spool_torn");
  {
    auto s = Spool::Open(dir);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Append(Batch("a", 1)).ok());
  }
  {
    std::ofstream f(dir + "/results.spool", std::ios::app | std::ios::binary);
    f.write("\x40\x00\x00\x00\x01\x02", 6);  // a crash in the middle of an append
  }
  auto s = Spool::Open(dir);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Append(Batch("b", 1)).ok());
  auto c = (*s)->ReadAll();
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->batches.size(), 2u);
  EXPECT_EQ(c->batches[1].lease_id(), "b");
}

TEST(SpoolTest, OneWorkerPerSpool) {
  std::string dir = TempDir("spool_lock");
  auto a = Spool::Open(dir);
  ASSERT_TRUE(a.ok());
  auto b = Spool::Open(dir);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
}

// ---------------------------------------------------------------------------- devices

TEST(DiscoveryTest, ParsesDeviceSelectors) {
  EXPECT_EQ(ParseDeviceSelector("cpu")->kind, "cpu");
  EXPECT_EQ(ParseDeviceSelector("cuda")->index, 0);
  EXPECT_EQ(ParseDeviceSelector("cuda:3")->index, 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", ""}) {
    EXPECT_EQ(ParseDeviceSelector(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DiscoveryTest, TheCpuByDefaultAndAMissingGpuIsAClearError) {
  auto d = SelectDevices({});
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].info.device_class(), codegen::HostDeviceClass());
  EXPECT_EQ((*d)[0].info.kind(), "cpu");
  EXPECT_GT((*d)[0].info.peak_gflops(), 0);
  EXPECT_TRUE((*d)[0].can_measure);
  auto twice = SelectDevices({"cpu", "cpu"});
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->size(), 1u);

  const int gpus = static_cast<int>(DiscoverGpus().size());
  for (const Device& g : DiscoverGpus()) {
    EXPECT_EQ(g.info.device_class().rfind("cuda:", 0), 0u) << g.info.device_class();
    EXPECT_TRUE(g.can_measure) << "a GPU the driver reports has a measurement child";
  }
  auto missing = SelectDevices({"cuda:" + std::to_string(gpus)});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cuda:" + std::to_string(gpus)), std::string::npos)
      << missing.status();
}

}  // namespace
}  // namespace lathe::worker
