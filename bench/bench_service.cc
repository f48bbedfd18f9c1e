// bench_service: what lathed costs per candidate, how it holds up under many workers, and how
// measurement throughput scales with real workers. Figures are printed beside their targets,
// never asserted.
//
//   1. dispatch overhead: an in-process daemon (TunerService behind its gRPC server on
//      loopback, a small search so that candidate generation does not hide the rest) and one
//      synthetic worker that leases and reports fake results as fast as it can: µs per
//      candidate spent in Lease + Report (target <= 500 µs), and the wall time per candidate.
//   2. many workers: N simulated worker clients (threads with their own channels, bounded in
//      time and iterations) leasing one task at a time, "measuring" it (a sleep) and reporting
//      a fake result: leases/s and the p50/p99 latency of Lease calls (target p99 <= 50 ms).
//   3. real workers: lathed and lathe-worker processes from the build directory measure a
//      real job with 1 worker, then with 2: results/s in the steady state and the ratio
//      (target >= 1.8x).
//
// Flags: --workers N (default 500), --seconds S (default 10, per part-2 run), --measure-ms M
// (simulated measurement per task in part 2, default 1000), --candidates N
// (part 1, default 3000), --real-trials N (part 3, default 48), --skip-real, --quick.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codegen/host.h"
#include "lathe/v1/service.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "tuner/client.h"
#include "tuner/grpc_server.h"
#include "tuner/service.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using lathe::tuner::GrpcServer;
using lathe::tuner::TunerService;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string TempDir() {
  char tmpl[] = "/tmp/lathe_bench_service_XXXXXX";
  return mkdtemp(tmpl);
}

// An in-process daemon on 127.0.0.1:0.
struct Daemon {
  std::unique_ptr<TunerService> service;
  std::unique_ptr<GrpcServer> server;
  std::string dir;

  static std::unique_ptr<Daemon> Start(int population, int generations) {
    auto d = std::make_unique<Daemon>();
    d->dir = TempDir();
    lathe::tuner::ServiceOptions o;
    o.db_path = d->dir + "/tuning.db";
    o.search.population = population;
    o.search.generations = generations;
    o.use_cost_model = false;  // fake results would teach it nothing
    o.heartbeat_interval_ms = 10000;
    o.lease_duration_ms = 120000;
    auto s = TunerService::Create(o);
    if (!s.ok()) {
      std::fprintf(stderr, "bench_service: %s\n", s.status().ToString().c_str());
      return nullptr;
    }
    d->service = std::move(*s);
    lathe::tuner::GrpcServerOptions g;
    g.listen = "127.0.0.1:0";
    auto srv = GrpcServer::Start(d->service.get(), g);
    if (!srv.ok()) {
      std::fprintf(stderr, "bench_service: %s\n", srv.status().ToString().c_str());
      return nullptr;
    }
    d->server = std::move(*srv);
    return d;
  }
  ~Daemon() {
    if (server) server->Shutdown(std::chrono::milliseconds(1000));
    if (service) service->Shutdown();
    server.reset();
    service.reset();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

std::chrono::system_clock::time_point In(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

std::string SubmitJob(const std::string& address, const std::string& workload, int trials,
                      int batch) {
  lathe::tuner::ClientOptions co;
  co.address = address;
  auto client = lathe::tuner::TunerClient::Connect(co);
  if (!client.ok()) {
    std::printf("   connect: %s\n", client.status().ToString().c_str());
    return "";
  }
  lathe::v1::JobSpec spec;
  spec.add_workloads(workload);
  spec.set_target("cpu");
  spec.set_device_class(lathe::codegen::HostDeviceClass());
  spec.set_trials(trials);
  spec.set_batch(batch);
  spec.set_seed(1);
  spec.set_min_repeat_ms(1);
  auto id = (*client)->SubmitJob(spec);
  if (!id.ok()) {
    std::printf("   submit: %s\n", id.status().ToString().c_str());
    return "";
  }
  return *id;
}

// A synthetic worker: its own channel, registered with the host's device class.
class FakeWorker {
 public:
  explicit FakeWorker(const std::string& address, uint64_t seed) : rng_(seed) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = lathe::v1::WorkerService::NewStub(channel_);
  }

  bool Register() {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(30000));
    lathe::v1::RegisterRequest req;
    req.set_hostname("bench");
    lathe::v1::DeviceInfo* d = req.add_devices();
    d->set_device_class(lathe::codegen::HostDeviceClass());
    d->set_kind("cpu");
    d->set_cores(2);
    lathe::v1::RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    if (!s.ok()) return false;
    id_ = resp.worker_id();
    return true;
  }

  // Leases up to max_tasks; returns false on an RPC error.
  bool Lease(int max_tasks, int wait_ms, lathe::v1::LeaseResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(wait_ms + 30000));
    lathe::v1::LeaseRequest req;
    req.set_worker_id(id_);
    req.set_device_class(lathe::codegen::HostDeviceClass());
    req.set_max_tasks(max_tasks);
    req.set_wait_ms(wait_ms);
    return stub_->Lease(&ctx, req, resp).ok();
  }

  bool Report(const lathe::v1::LeaseResponse& lease, int* accepted) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(30000));
    lathe::v1::ReportRequest req;
    req.set_worker_id(id_);
    req.set_lease_id(lease.lease_id());
    req.set_device_class(lathe::codegen::HostDeviceClass());
    std::uniform_real_distribution<double> us(50, 500);
    for (const lathe::v1::Task& t : lease.tasks()) {
      lathe::v1::MeasureResult* r = req.add_results();
      r->set_candidate_id(t.candidate_id());
      r->set_error_class(lathe::v1::OK);
      double m = us(rng_);
      for (double f : {0.99, 1.0, 1.01}) r->add_repeats_us(m * f);
      r->set_median_us(m);
      r->set_cv(0.01);
      r->set_compile_ms(1);
    }
    lathe::v1::ReportResponse resp;
    grpc::Status s = stub_->Report(&ctx, req, &resp);
    if (accepted) *accepted = resp.accepted();
    return s.ok();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<lathe::v1::WorkerService::Stub> stub_;
  std::string id_;
  std::mt19937_64 rng_;
};

// --- part 1 ---

void DispatchOverhead(int candidates) {
  std::printf("\n1. dispatch overhead per candidate (in-process daemon, 1 synthetic worker)\n");
  auto d = Daemon::Start(/*population=*/256, /*generations=*/1);
  if (!d) return;
  FakeWorker w(d->server->address(), 1);
  if (!w.Register()) {
    std::printf("   register failed\n");
    return;
  }
  const std::string workload = "matmul:m=512,n=512,k=512";
  if (SubmitJob(d->server->address(), workload, candidates, 256).empty()) return;
  double lease_s = 0, report_s = 0, empty_wait_s = 0;
  int done = 0, leases = 0, reports = 0;
  auto t0 = Clock::now();
  auto give_up = t0 + std::chrono::seconds(300);
  while (done < candidates && Clock::now() < give_up) {
    lathe::v1::LeaseResponse lease;
    auto a = Clock::now();
    if (!w.Lease(64, 2000, &lease)) break;
    auto b = Clock::now();
    if (lease.tasks_size() == 0) {
      empty_wait_s += Seconds(b - a);
      continue;
    }
    lease_s += Seconds(b - a);
    ++leases;
    int accepted = 0;
    if (!w.Report(lease, &accepted)) break;
    report_s += Seconds(Clock::now() - b);
    ++reports;
    done += lease.tasks_size();
  }
  double wall = Seconds(Clock::now() - t0);
  if (done == 0) {
    std::printf("   no candidate was dispatched\n");
    return;
  }
  double per = (lease_s + report_s) / done * 1e6;
  std::printf("   %d candidates in %d leases (64 max), %.2f s wall\n", done, leases, wall);
  std::printf("   Lease   %7.1f us/candidate (includes waiting for the round's search)\n",
              lease_s / done * 1e6);
  std::printf("   Report  %7.1f us/candidate (SQLite commit per report)\n", report_s / done * 1e6);
  std::printf("   daemon  %7.1f us/candidate in Lease+Report   target <= 500 us  %s\n", per,
              per <= 500 ? "ok" : "MISSED");
  std::printf("   wall    %7.1f us/candidate, search included (%.2f s waiting for rounds)\n",
              wall / done * 1e6, empty_wait_s);
}

// --- part 2 ---

// With `prefill`, a round of 4096 tasks is queued before the clock starts and the next
// round's search overlaps only the end of the window: the dispatch path nearly alone. Without
// it, rounds of 256 are searched while the workers lease: the daemon as it runs a job.
void ManyWorkers(int n, int seconds, int measure_ms, bool prefill) {
  std::printf(
      "\n2%s. %d simulated workers on loopback, %d s; each lease (1 task, no wait) is followed "
      "by %d ms (+-50%%) of simulated measurement and a report, an empty one by 100 ms; %s\n",
      prefill ? "a" : "b", n, seconds, measure_ms,
      prefill ? "4096 tasks queued first" : "rounds of 256 searched meanwhile");
  auto d = Daemon::Start(/*population=*/512, /*generations=*/1);
  if (!d) return;
  const std::string address = d->server->address();
  const int batch = prefill ? 4096 : 256;
  if (SubmitJob(address, "matmul:m=1024,n=1024,k=1024", 1000000, batch).empty()) return;
  for (auto until = Clock::now() + std::chrono::seconds(180);
       prefill && d->service->QueueDepth() < batch && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::mutex mu;
  std::vector<double> lat_ms, lat_tasks_ms;
  std::atomic<int64_t> leases{0}, tasks{0}, errors{0}, registered{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  const auto stop_at_fn = [&] { return Clock::now() + std::chrono::seconds(seconds); };
  Clock::time_point stop_at;
  std::mutex start_mu;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      FakeWorker w(address, 1000 + i);
      if (!w.Register()) {
        ++errors;
        return;
      }
      ++registered;
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      Clock::time_point until;
      {
        std::lock_guard<std::mutex> lock(start_mu);
        until = stop_at;
      }
      std::vector<double> mine, mine_tasks;
      std::mt19937_64 rng(i);
      std::uniform_int_distribution<int> measure(measure_ms / 2, measure_ms * 3 / 2);
      // Workers are mid-measurement at the start, not a thundering herd of first leases.
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(0, measure_ms)(rng)));
      for (int iter = 0; iter < 100000 && Clock::now() < until; ++iter) {
        lathe::v1::LeaseResponse lease;
        auto a = Clock::now();
        if (!w.Lease(1, 0, &lease)) {
          ++errors;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        double ms = Seconds(Clock::now() - a) * 1e3;
        mine.push_back(ms);
        ++leases;
        if (lease.tasks_size() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        mine_tasks.push_back(ms);
        tasks += lease.tasks_size();
        // "Measure" the candidate, then report it.
        std::this_thread::sleep_for(std::chrono::milliseconds(measure(rng)));
        if (!w.Report(lease, nullptr)) ++errors;
      }
      std::lock_guard<std::mutex> lock(mu);
      lat_ms.insert(lat_ms.end(), mine.begin(), mine.end());
      lat_tasks_ms.insert(lat_tasks_ms.end(), mine_tasks.begin(), mine_tasks.end());
    });
  }
  auto reg_until = Clock::now() + std::chrono::seconds(60);
  while (registered.load() + errors.load() < n && Clock::now() < reg_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lock(start_mu);
    stop_at = stop_at_fn();
  }
  auto t0 = Clock::now();
  go.store(true);
  for (auto& t : threads) t.join();
  // Leasing stops at the deadline; what follows is the last simulated measurements.
  double wall = std::min<double>(Seconds(Clock::now() - t0), seconds);
  double p99 = Percentile(lat_ms, 0.99);
  std::printf("   %lld registered, %lld errors\n", static_cast<long long>(registered.load()),
              static_cast<long long>(errors.load()));
  std::printf("   %.0f leases/s (%.0f with a task, i.e. candidates/s), %.1f s\n",
              leases.load() / wall, tasks.load() / wall, wall);
  std::printf("   Lease latency p50 %.2f ms  p99 %.2f ms   target p99 <= 50 ms  %s\n",
              Percentile(lat_ms, 0.5), p99, p99 <= 50 ? "ok" : "MISSED");
  std::printf("   Lease latency of leases that got a task: p50 %.2f ms  p99 %.2f ms\n",
              Percentile(lat_tasks_ms, 0.5), Percentile(lat_tasks_ms, 0.99));
}

// --- part 3 ---

struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

std::unique_ptr<Child> Spawn(std::vector<std::string> argv, const std::string& log) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  auto c = std::make_unique<Child>();
  int rc = posix_spawn(&c->pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) c->pid = -1;
  return c;
}

// Results per second in the steady state (after the first 4 results) of a real job measured
// by `workers` lathe-worker processes; 0 on failure.
double RealThroughput(int workers, int trials) {
  std::string dir = TempDir();
  std::string log = dir + "/lathed.log";
  auto daemon = Spawn({LATHED_BIN, "--listen", "127.0.0.1:0", "--db", dir + "/tuning.db"}, log);
  std::string address;
  for (int i = 0; i < 1500 && address.empty(); ++i) {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
      const std::string p = "lathed: listening on ";
      if (line.rfind(p, 0) == 0) address = line.substr(p.size());
    }
    if (address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (address.empty()) {
    std::printf("   lathed did not start (log %s)\n", log.c_str());
    return 0;
  }
  std::vector<std::unique_ptr<Child>> ws;
  for (int i = 0; i < workers; ++i) {
    ws.push_back(Spawn({LATHE_WORKER_BIN, "--tuner", address, "--device", "cpu", "--spool",
                        dir + "/spool" + std::to_string(i)},
                       dir + "/worker" + std::to_string(i) + ".log"));
  }
  lathe::tuner::ClientOptions co;
  co.address = address;
  auto client = lathe::tuner::TunerClient::Connect(co);
  if (!client.ok()) return 0;
  for (int i = 0; i < 600; ++i) {
    auto l = (*client)->ListWorkers();
    if (l.ok() && static_cast<int>(l->size()) >= workers) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  lathe::v1::JobSpec spec;
  spec.add_workloads("matmul:m=64,n=64,k=64");
  spec.set_target("cpu");
  spec.set_trials(trials);
  spec.set_batch(16);
  spec.set_seed(5);
  spec.set_min_repeat_ms(20);
  auto id = (*client)->SubmitJob(spec);
  if (!id.ok()) {
    std::printf("   submit: %s\n", id.status().ToString().c_str());
    return 0;
  }
  Clock::time_point first;
  int first_done = -1, last_done = 0;
  Clock::time_point last;
  auto st = (*client)->Watch(*id, [&](const lathe::v1::JobStatus& s) {
    int n = s.workloads_size() ? s.workloads(0).trials_done() : 0;
    if (first_done < 0 && n >= 4) {
      first_done = n;
      first = Clock::now();
    }
    if (n > last_done) {
      last_done = n;
      last = Clock::now();
    }
  });
  ws.clear();
  daemon.reset();
  std::error_code ec;
  if (!st.ok() || first_done < 0 || last_done <= first_done) {
    std::printf("   job failed: %s (logs in %s)\n", st.status().ToString().c_str(), dir.c_str());
    return 0;
  }
  std::filesystem::remove_all(dir, ec);
  double rate = (last_done - first_done) / Seconds(last - first);
  std::printf("   %d worker%s: %.2f results/s (%d results in %.1f s)\n", workers,
              workers == 1 ? " " : "s", rate, last_done - first_done, Seconds(last - first));
  return rate;
}

void RealWorkers(int trials) {
  std::printf(
      "\n3. real lathe-worker processes, matmul:m=64,n=64,k=64, %d trials, 20 ms per "
      "candidate\n",
      trials);
  double one = RealThroughput(1, trials);
  double two = RealThroughput(2, trials);
  if (one > 0 && two > 0) {
    std::printf("   2 workers vs 1: %.2fx   target >= 1.8x  %s (%u cores here)\n", two / one,
                two / one >= 1.8 ? "ok" : "MISSED", std::thread::hardware_concurrency());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 500, seconds = 10, candidates = 3000, real_trials = 48, measure_ms = 1000;
  bool skip_real = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--workers") {
      workers = next();
    } else if (a == "--seconds") {
      seconds = next();
    } else if (a == "--measure-ms") {
      measure_ms = std::max(2, next());
    } else if (a == "--candidates") {
      candidates = next();
    } else if (a == "--real-trials") {
      real_trials = next();
    } else if (a == "--skip-real") {
      skip_real = true;
    } else if (a == "--quick") {
      workers = 100;
      seconds = 3;
      candidates = 500;
      real_trials = 24;
    } else {
      std::fprintf(
          stderr,
          "usage: bench_service [--workers N] [--seconds S] [--measure-ms M] [--candidates N] "
          "[--real-trials N] [--skip-real] [--quick]\n");
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);  // the in-process daemon logs every registration
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("bench_service on %s, load average %.2f (figures on a loaded machine are low)\n",
              lathe::codegen::HostDeviceClass().c_str(), load[0]);
  DispatchOverhead(candidates);
  ManyWorkers(workers, seconds, measure_ms, /*prefill=*/true);
  ManyWorkers(workers, seconds, measure_ms, /*prefill=*/false);
  if (!skip_real) RealWorkers(real_trials);
  return 0;
}
